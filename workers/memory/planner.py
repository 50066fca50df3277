"""plan_batch_size: the largest batch (and precision, checkpointing, accumulation) that fits.

Peak memory grows almost affinely with the batch size (weights, gradients and optimizer state are
fixed; activations scale), so two traces give a line, the line gives a candidate, and a trace at the
candidate verifies it. A miss refits the line through the verified points (secant steps), so a
handful of traces suffice where a bisection would need log2(max_batch).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch

from workers.memory.cuda_model import CudaTarget
from workers.memory.estimator import MemoryEstimate, estimate_training_memory
from workers.memory.loop import Batch, LossFn, OptimizerSpec
from workers.memory.margins import error_margin

DEFAULT_MAX_BATCH = 4096
MAX_TRACES_PER_OPTION = 6


@dataclass(frozen=True)
class PlanOption:
    """One configuration the planner considered: its largest fitting batch (0 when none)."""

    batch_size: int
    precision: str  # "fp32", "bf16" or "fp16"
    checkpointing: bool
    accumulation_steps: int
    estimated_bytes: int
    fits: bool

    @property
    def effective_batch(self) -> int:
        return self.batch_size * self.accumulation_steps


@dataclass(frozen=True)
class BatchPlan:
    batch_size: int
    precision: str
    accumulation_steps: int
    checkpointing: bool
    estimated_bytes: int
    budget_bytes: int
    margin: float
    device: str
    fits: bool
    alternatives: tuple[PlanOption, ...]
    traces: int
    estimate: MemoryEstimate | None

    @property
    def usable_bytes(self) -> int:
        return int(self.budget_bytes * (1.0 - self.margin))


@dataclass
class _Ctx:
    model: torch.nn.Module
    make_batch: Callable[[int], Batch]
    usable: int
    max_batch: int
    kwargs: dict[str, Any]
    traces: int = 0


def plan_batch_size(
    model: torch.nn.Module,
    make_batch: Callable[[int], Batch],
    budget_bytes: int,
    *,
    max_batch: int | None = None,
    target_batch: int | None = None,
    loss_fn: LossFn | None = None,
    optimizer: OptimizerSpec = "adam",
    device: str = "cuda",
    margin: float | None = None,
    precision: str = "fp32",
    amp_dtype: str | None = None,
    allow_alternatives: bool = True,
    cuda_target: CudaTarget | None = None,
    iterations: int = 2,
) -> BatchPlan:
    """Largest batch whose estimated peak fits ``budget_bytes * (1 - margin)``.

    ``margin`` defaults to the estimator's measured error on the kinds of layer the model holds
    (``workers.memory.margins``: a calibration table per device), not a constant.

    The compared figure is ``device_total_bytes`` (reserved + CUDA context) on CUDA and the peak
    of live bytes on CPU. ``make_batch(n)`` builds an example batch of ``n`` rows.
    ``precision`` ("fp32", "bf16", "fp16") is the configuration tried first.
    ``target_batch`` is the effective batch training wants: a smaller fitting batch gets
    gradient accumulation to keep it. When batch 1 does not fit at full precision, mixed
    precision (``amp_dtype``, default bf16 on Ampere+ GPUs and CPU, fp16 before), activation
    checkpointing and both are tried, and the first that fits becomes the plan.
    """
    if margin is None:
        margin = error_margin(model, device)
    if not 0.0 <= margin < 1.0:
        raise ValueError("margin must be in [0, 1)")
    ctx = _Ctx(
        model=model,
        make_batch=make_batch,
        usable=int(budget_bytes * (1.0 - margin)),
        max_batch=max_batch or target_batch or DEFAULT_MAX_BATCH,
        kwargs=dict(
            loss_fn=loss_fn,
            optimizer=optimizer,
            device=device,
            cuda_target=cuda_target,
            iterations=iterations,
        ),
    )
    low = amp_dtype or (precision if precision != "fp32" else _default_amp(device, cuda_target))
    options: list[tuple[PlanOption, MemoryEstimate | None]] = [_best_batch(ctx, precision, False)]
    if allow_alternatives and not options[0][0].fits:
        configs = [(low, False), (precision, True), (low, True)] if low else [(precision, True)]
        configs = list(dict.fromkeys(c for c in configs if c != (precision, False)))
        options += [_best_batch(ctx, prec, ckpt) for prec, ckpt in configs]
    options = [(_with_accumulation(opt, target_batch), est) for opt, est in options]
    chosen, estimate = next(((o, e) for o, e in options if o.fits), options[0])
    return BatchPlan(
        batch_size=chosen.batch_size,
        precision=chosen.precision,
        accumulation_steps=chosen.accumulation_steps,
        checkpointing=chosen.checkpointing,
        estimated_bytes=chosen.estimated_bytes,
        budget_bytes=budget_bytes,
        margin=margin,
        device=device,
        fits=chosen.fits,
        alternatives=tuple(o for o, _ in options if o is not chosen),
        traces=ctx.traces,
        estimate=estimate,
    )


def _default_amp(device: str, target: CudaTarget | None) -> str | None:
    """The mixed precision the device supports: on a CPU (an edge box, a phone-class budget) what
    oneDNN runs natively on it (bf16, else fp16, else none); on CUDA bf16 from Ampere, fp16 before."""
    if device == "cpu":
        if torch.ops.mkldnn._is_mkldnn_bf16_supported():
            return "bf16"
        return "fp16" if torch.ops.mkldnn._is_mkldnn_fp16_supported() else None
    if (target or CudaTarget()).compute_capability[0] < 8:
        return "fp16"  # no bf16 tensor cores before Ampere
    return "bf16"


def _with_accumulation(option: PlanOption, target_batch: int | None) -> PlanOption:
    if not option.fits or not target_batch or option.batch_size >= target_batch:
        return option
    return replace(option, accumulation_steps=math.ceil(target_batch / option.batch_size))


def _measure(ctx: _Ctx, batch: int, precision: str, ckpt: bool) -> tuple[int, MemoryEstimate]:
    ctx.traces += 1
    amp = None if precision == "fp32" else precision
    est = estimate_training_memory(
        ctx.model, ctx.make_batch(batch), amp=amp, checkpointing=ckpt, **ctx.kwargs
    )
    used = est.device_total_bytes if est.device == "cuda" else est.peak_allocated_bytes
    return used, est


def _best_batch(ctx: _Ctx, precision: str, ckpt: bool) -> tuple[PlanOption, MemoryEstimate | None]:
    smallest, first = _smallest_batch(ctx, precision, ckpt)
    points: dict[int, tuple[int, MemoryEstimate]] = {smallest: first}
    if first[0] > ctx.usable:
        return PlanOption(0, precision, ckpt, 1, first[0], False), None
    probe = min(ctx.max_batch, 8)
    if probe > smallest:
        points[probe] = _measure(ctx, probe, precision, ckpt)
    for _ in range(MAX_TRACES_PER_OPTION):
        candidate = _next_candidate(points, ctx.usable, ctx.max_batch)
        if candidate is None or candidate in points:
            break
        points[candidate] = _measure(ctx, candidate, precision, ckpt)
    best = max(b for b, (used, _) in points.items() if used <= ctx.usable)
    used, est = points[best]
    return PlanOption(best, precision, ckpt, 1, used, True), est


def _smallest_batch(ctx: _Ctx, precision: str, ckpt: bool) -> tuple[int, tuple[int, MemoryEstimate]]:
    try:
        return 1, _measure(ctx, 1, precision, ckpt)
    except ValueError:
        # BatchNorm refuses one row per channel in training: the smallest real batch is 2.
        return 2, _measure(ctx, 2, precision, ckpt)


def _next_candidate(points: dict[int, tuple[int, Any]], usable: int, max_batch: int) -> int | None:
    """Batch predicted to just fit by the line through the nearest fitting and failing points."""
    fitting = [b for b, (used, _) in points.items() if used <= usable]
    failing = [b for b, (used, _) in points.items() if used > usable]
    lo = max(fitting)
    hi = min(failing) if failing else None
    if hi is not None and hi == lo + 1:
        return None  # bracketed exactly
    if lo >= max_batch:
        return None
    ref = hi if hi is not None else max(b for b in points if b != lo) if len(points) > 1 else None
    if ref is None:
        return min(max_batch, lo * 2)
    slope = (points[ref][0] - points[lo][0]) / (ref - lo)
    if slope <= 0:
        return min(max_batch, hi - 1 if hi else max_batch)
    guess = lo + math.floor((usable - points[lo][0]) / slope)
    if hi is None and ref < lo and guess == lo:
        # The line through two verified points says one more row no longer fits: a failing trace
        # would only confirm it (the plan is always a verified point, so stopping here is safe).
        return None
    upper = (hi - 1) if hi is not None else max_batch
    guess = max(lo + 1, min(guess, upper))
    return guess
