"""Small models and a profiler-measured CPU peak for the estimator tests."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils._pytree import tree_flatten

from workers.memory.loop import build_optimizer, run_training
from workers.memory.optimizers import OptimizerSpec


class TinyClassifier(nn.Module):
    """``model(x, y)`` -> logits; the loss function reads the labels from the batch."""

    def __init__(self, features: int = 32, hidden: int = 64, classes: int = 4) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(features, hidden),
            nn.ReLU(),
            nn.Dropout(0.1),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, classes),
        )

    def forward(self, x: torch.Tensor, y: torch.Tensor | None = None) -> torch.Tensor:
        return self.net(x)


class TinyCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1),
            nn.BatchNorm2d(8),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1),
            nn.BatchNorm2d(16),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(16, 5),
        )

    def forward(self, x: torch.Tensor, y: torch.Tensor | None = None) -> torch.Tensor:
        return self.body(x)


class DeepMLP(nn.Module):
    """Wide activations and a ModuleList of blocks: checkpointing has something to save."""

    def __init__(self, width: int = 256, depth: int = 6) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(width, width), nn.GELU()) for _ in range(depth))
        self.head = nn.Linear(width, 4)

    def forward(self, x: torch.Tensor, y: torch.Tensor | None = None) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.head(x)


class SelfLoss(nn.Module):
    """Returns its own scalar loss from a dict batch: ``model(**batch)``."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(16, 3)

    def forward(self, features: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(self.lin(features), labels)


def xent(output: torch.Tensor, batch: Any) -> torch.Tensor:
    return F.cross_entropy(output, batch[1])


def table_batch(n: int, features: int = 32, classes: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(n, features), torch.randint(0, classes, (n,))


def image_batch(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(n, 3, 16, 16), torch.randint(0, 5, (n,))


def measured_cpu_peak(
    model: nn.Module,
    batch: Any,
    loss_fn: Any,
    optimizer: OptimizerSpec,
    *,
    accumulation_steps: int = 1,
    amp: str | None = None,
) -> int:
    """Live bytes before training + highest running sum of profiler [memory] events."""
    from torch.profiler import ProfilerActivity, profile

    opt = build_optimizer(list(model.parameters()), optimizer)
    tensors = [*model.parameters(), *model.buffers(), *tree_flatten(batch)[0]]
    storages = {id(t.untyped_storage()): t.untyped_storage() for t in tensors if isinstance(t, torch.Tensor)}
    before = sum(s.nbytes() for s in storages.values())
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        run_training(
            model, batch, opt, loss_fn=loss_fn, iterations=3, accumulation_steps=accumulation_steps, amp=amp
        )
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    running = peak = 0
    for event in sorted(events, key=lambda e: e.start_ns()):
        running += event.nbytes()
        peak = max(peak, running)
    return before + peak


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)
