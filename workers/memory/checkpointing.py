"""Activation checkpointing applied to a model's repeated blocks.

The planner proposes checkpointing as a way to fit a bigger batch; the training worker must apply
the same policy, so both use :func:`apply_activation_checkpointing`.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch.utils.checkpoint import checkpoint


def checkpoint_blocks(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The blocks to checkpoint: children of the heaviest ModuleList (transformer layers), else of
    the heaviest Sequential, else the model's direct children."""
    for kind in (torch.nn.ModuleList, torch.nn.Sequential):
        containers = [m for m in model.modules() if type(m) is kind and len(m) > 1]
        if containers:
            best = max(containers, key=_param_count)
            return list(best.children())
    return list(model.children())


def apply_activation_checkpointing(model: torch.nn.Module) -> int:
    """Recompute each block's activations in backward instead of keeping them. Returns the
    number of blocks wrapped; mutates ``model``."""
    blocks = checkpoint_blocks(model)
    for block in blocks:
        block.forward = functools.partial(_checkpointed, block.forward)  # type: ignore[method-assign]
    return len(blocks)


def _checkpointed(forward: Any, *args: Any, **kwargs: Any) -> Any:
    return checkpoint(forward, *args, use_reentrant=False, **kwargs)


def _param_count(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())
