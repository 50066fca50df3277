"""The one optimizer builder: what training steps with is what the estimator traces.

An optimizer is a built-in name plus its hyperparameters (``OptimizerConfig``); training builds
it from a recipe and hands the same config to the planner, so the optimizer state the estimate
counts (Adam's two moments, SGD's momentum buffer when momentum is set) is the state training
allocates. torch is imported lazily: recipes and plans are read where torch is not loaded.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

DEFAULT_LR = 1e-3


@dataclass(frozen=True)
class OptimizerConfig:
    """A built-in optimizer (``name`` in ``OPTIMIZERS``) and its keyword hyperparameters."""

    name: str
    lr: float = DEFAULT_LR
    options: Mapping[str, Any] = field(default_factory=dict)  # momentum, weight_decay, betas, ...


def _classes() -> dict[str, Callable[..., Any]]:
    import torch  # lazy: see the module docstring

    return {"sgd": torch.optim.SGD, "adam": torch.optim.Adam, "adamw": torch.optim.AdamW}


OPTIMIZERS = ("sgd", "adam", "adamw")

# What a bare name means to the estimator's own API (``optimizer="sgd"``): SGD with momentum,
# the usual setup of the models it is benchmarked on. Training never passes a bare name: it
# passes the recipe's config, whose SGD has torch's default momentum 0 unless the recipe sets it.
SHORTHANDS = {
    "sgd": OptimizerConfig("sgd", options={"momentum": 0.9}),
    "adam": OptimizerConfig("adam"),
    "adamw": OptimizerConfig("adamw"),
}

OptimizerSpec = str | OptimizerConfig | Callable[[Any], Any]


def optimizer_config(spec: str | OptimizerConfig) -> OptimizerConfig:
    """A config as given, or the shorthand a bare name stands for; unknown names are an error."""
    config = SHORTHANDS.get(spec.lower()) if isinstance(spec, str) else spec
    if config is None or config.name not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {spec!r}: use 'sgd', 'adam', 'adamw' or a callable")
    return config


def build_optimizer(params: list[Any], spec: OptimizerSpec, *, foreach: bool | None = None) -> Any:
    """The torch optimizer for ``spec``: a name, an ``OptimizerConfig`` or a callable building an
    optimizer from the parameters."""
    if not isinstance(spec, str | OptimizerConfig):
        return spec(params)
    config = optimizer_config(spec)
    return _classes()[config.name](params, lr=config.lr, foreach=foreach, **dict(config.options))


def optimizer_name(spec: OptimizerSpec) -> str:
    if isinstance(spec, str):
        return spec
    if isinstance(spec, OptimizerConfig):
        return spec.name
    return str(getattr(spec, "__name__", "custom"))
