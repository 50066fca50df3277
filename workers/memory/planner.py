"""plan_batch_size: the largest batch (and precision, checkpointing, accumulation) that fits.

Every allocation of the training step is a fixed part plus a per-row part, so two traces of the
same step give each event as a line in the batch size (:mod:`workers.memory.extrapolation`); the
largest batch whose extrapolated peak fits is the candidate, and a trace at the candidate verifies
it (the plan is always a traced batch). A miss refits the lines through the two verified traces
nearest the answer. The first trace is at a prime batch (17 unless it divides a parameter's size):
an allocation whose size it divides is guessed per-row, any other fixed, and the batch those lines
say fits is traced second; lines through the two are then exact, so when the guess was right the
second trace is the answer, verified. Typically two traces (three when the guess misses: the
answer of the exact lines is traced too). Where two traces do not pair (a kernel changes with the
batch), the peaks themselves are fitted (secant steps).

Traces are cached per model architecture, batch shapes and options (``_TRACES``): a worker
planning the same model for another device, budget or precision re-traces only what it has not
traced before.
"""

from __future__ import annotations

import contextlib
import math
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from workers.memory.cuda_model import CudaTarget, simulate
from workers.memory.estimator import MemoryEstimate, estimate_and_trace
from workers.memory.extrapolation import (
    BatchLine,
    TraceProfile,
    batch_shapes,
    divisible_line,
    largest_fitting,
    pairable,
    profile_of,
)
from workers.memory.loop import Batch, LossFn, OptimizerSpec
from workers.memory.margins import error_margin
from workers.memory.step_replay import StepReplay

DEFAULT_MAX_BATCH = 4096
MAX_TRACES_PER_OPTION = 6
# The first traced batch, at least 16: above 16 ATen's convolution backend no longer depends on
# the batch (cpu_kernels._MIN_CALIBRATION_BATCH), so its trace pairs with the answer's. A prime
# (the first of these dividing no parameter's size), so a fixed size is rarely a multiple of it.
PROBE_BATCHES = (17, 19, 23, 29, 31, 37)
TRACE_CACHE_SIZE = 32


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
    cached_traces: int = 0  # batches whose trace came from the cache (not counted in ``traces``)

    @property
    def usable_bytes(self) -> int:
        return int(self.budget_bytes * (1.0 - self.margin))


@dataclass(frozen=True)
class _Point:
    """One traced batch: the compared figure, its estimate, and its profile for extrapolation."""

    used: int
    estimate: MemoryEstimate
    profile: TraceProfile | None
    step_replay: StepReplay | None = None  # its optimizer steps, for the next trace to replay


@dataclass
class _Ctx:
    model: torch.nn.Module
    make_batch: Callable[[int], Batch]
    usable: int
    max_batch: int
    kwargs: dict[str, Any]
    key: tuple[Any, ...] = ()
    traces: int = 0
    cached: int = 0
    step_replay: StepReplay | None = None  # from the plan's latest trace (or cached point)


_TRACES: OrderedDict[tuple[Any, ...], _Point] = OrderedDict()


def clear_trace_cache() -> None:
    """Forget every cached trace (the next plan of any model traces from scratch)."""
    _TRACES.clear()


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
    ctx.key = (_architecture(model), *(_hashable(v) for v in ctx.kwargs.values()), torch.get_num_threads())
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
        cached_traces=ctx.cached,
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


def _architecture(model: torch.nn.Module) -> tuple[Any, ...]:
    """What a fake trace depends on of a model: each module's class (its code), settings, and the
    shape, dtype and trainability of its own parameters and buffers; never the values."""

    def tensors(named: Any) -> tuple[Any, ...]:
        return tuple((n, tuple(t.shape), t.dtype, t.requires_grad, t.device.type) for n, t in named)

    return tuple(
        (
            name,
            type(module),
            module.extra_repr(),
            tensors(module.named_parameters(recurse=False)),
            tensors(module.named_buffers(recurse=False)),
            bool(module._forward_hooks or module._forward_pre_hooks or module._backward_hooks),
        )
        for name, module in model.named_modules()
    )


def _hashable(value: Any) -> Any:
    try:
        hash(value)
    except TypeError:
        return repr(value)  # an OptimizerConfig holds a dict of hyperparameters
    return value


def example_batch(make_batch: Callable[[int], Batch], batch: int) -> Batch:
    """``make_batch(batch)`` built on fake tensors: a trace sees only the batch's shapes, dtypes,
    strides and storages, so its rows are never generated or gathered (a 65,536-row embedding batch
    was 0.4 s of a 0.8 s plan, spent on random numbers no trace reads). A ``make_batch`` that needs
    values (``.item()``, a boolean mask, ``.numpy()``) raises under fake tensors and runs for real."""
    try:
        with FakeTensorMode(allow_non_fake_inputs=True):
            return make_batch(batch)
    except Exception:  # any failure: the real call raises a real error again
        return make_batch(batch)


def _measure(ctx: _Ctx, batch: int, precision: str, ckpt: bool) -> _Point:
    example = example_batch(ctx.make_batch, batch)
    key = (*ctx.key, precision, ckpt, batch_shapes(example))
    point = _TRACES.get(key)
    if point is not None:
        _TRACES.move_to_end(key)
        ctx.cached += 1
        ctx.step_replay = point.step_replay or ctx.step_replay
        return point
    ctx.traces += 1
    amp = None if precision == "fp32" else precision
    est, trace = estimate_and_trace(
        ctx.model, example, amp=amp, checkpointing=ckpt, step_replay=ctx.step_replay, **ctx.kwargs
    )
    ctx.step_replay = trace.step_replay or ctx.step_replay
    used = est.device_total_bytes if est.device == "cuda" else est.peak_allocated_bytes
    profile = profile_of(trace, batch, example, keep_trace=est.device == "cuda")
    point = _Point(used, est, profile, trace.step_replay)
    _TRACES[key] = point
    while len(_TRACES) > TRACE_CACHE_SIZE:
        _TRACES.popitem(last=False)
    return point


def _best_batch(ctx: _Ctx, precision: str, ckpt: bool) -> tuple[PlanOption, MemoryEstimate | None]:
    points = _first_points(ctx, precision, ckpt)
    if all(point.used > ctx.usable for point in points.values()):
        smallest = min(points)
        return PlanOption(0, precision, ckpt, 1, points[smallest].used, False), None
    for _ in range(MAX_TRACES_PER_OPTION):
        candidate = _next_candidate(points, ctx.usable, ctx.max_batch, ctx.kwargs.get("cuda_target"))
        if candidate is None or candidate in points:
            break
        points[candidate] = _measure(ctx, candidate, precision, ckpt)
    best = max(b for b, point in points.items() if point.used <= ctx.usable)
    return PlanOption(best, precision, ckpt, 1, points[best].used, True), points[best].estimate


def _first_points(ctx: _Ctx, precision: str, ckpt: bool) -> dict[int, _Point]:
    """Two traces to draw the first lines through: the probe batch and the batch its trace alone
    says fits (``_guess``: above the probe when it fits, below it when not); else 2 rows (1 when 2
    do not fit) beside it. Not batch 1 first: a batch of one row often runs another program
    (squeezed views, other kernels), whose trace pairs with no other."""
    probe = min(ctx.max_batch, _probe_batch(ctx.model))
    points: dict[int, _Point] = {}
    with contextlib.suppress(ValueError):  # BatchNorm refuses one row per channel in training
        points[probe] = _measure(ctx, probe, precision, ckpt)
    if probe in points:
        fits = points[probe].used <= ctx.usable
        guess = _guess(ctx, points[probe], probe)
        if (probe < ctx.max_batch) if fits else (guess >= 2):
            with contextlib.suppress(ValueError):
                points[guess] = _measure(ctx, guess, precision, ckpt)
        if any(point.used <= ctx.usable for point in points.values()):
            return points
    for batch in (b for b in (2, 1) if b < probe and b not in points):
        with contextlib.suppress(ValueError):
            points[batch] = _measure(ctx, batch, precision, ckpt)
            if points[batch].used <= ctx.usable:
                break
    if not points:
        points[2] = _measure(ctx, 2, precision, ckpt)  # the smallest batch BatchNorm trains on
    return points


def _probe_batch(model: torch.nn.Module) -> int:
    sizes = {t.numel() for t in (*model.parameters(), *model.buffers())}
    return next((p for p in PROBE_BATCHES if all(n % p for n in sizes)), PROBE_BATCHES[0])


def _guess(ctx: _Ctx, point: _Point, probe: int) -> int:
    """The batch the probe's trace alone says fits (``extrapolation.divisible_line``): above the
    probe when the probe fits (at least one row more), below it when not (1 when nothing does)."""
    fits = point.used <= ctx.usable
    if point.profile is None:
        return min(ctx.max_batch, 2 * probe) if fits else 2
    used = _used_on(divisible_line(point.profile), point, ctx.kwargs.get("cuda_target"))
    if fits:
        return max(probe + 1, largest_fitting(used, ctx.usable, probe, ctx.max_batch))
    return largest_fitting(used, ctx.usable, 1, probe - 1)


def _next_candidate(
    points: dict[int, _Point], usable: int, max_batch: int, target: CudaTarget | None = None
) -> int | None:
    """The next batch to trace, None when the verified ``lo`` is the answer."""
    lo = max(b for b, p in points.items() if p.used <= usable)
    hi = min((b for b, p in points.items() if p.used > usable), default=None)
    if (hi is not None and hi == lo + 1) or lo >= max_batch:
        return None  # bracketed exactly, or capped
    upper = (hi - 1) if hi is not None else max_batch
    line = _line(points, lo, hi)
    if line is not None:
        guess = largest_fitting(_used_on(line, points[lo], target), usable, lo, upper)
        return None if guess <= lo else guess  # the lines say one more row no longer fits
    return _secant(points, lo, hi, usable, max_batch)


def _line(points: dict[int, _Point], lo: int, hi: int | None) -> BatchLine | None:
    """Event lines through ``lo`` and the nearest other trace of the same structure (``hi`` first)."""
    base = points[lo].profile
    partners = ([hi] if hi is not None else []) + sorted((b for b in points if b < lo), reverse=True)
    for b in partners:
        if pairable(base, points[b].profile):
            assert base is not None
            other = points[b].profile
            assert other is not None
            return BatchLine(base, other)
    return None


def _used_on(line: BatchLine, point: _Point, target: CudaTarget | None) -> Callable[[int], int]:
    """The compared figure at a batch, from the lines: live bytes on CPU, the allocator replay
    (reserved + context, as ``_measure``'s) on CUDA."""
    if point.estimate.device != "cuda":
        return line.peak
    cuda = target or CudaTarget()

    def used(batch: int) -> int:
        _, reserved, breakdown = simulate(line.trace_at(batch), cuda, None)
        return reserved + breakdown.get("cuda_context", 0)

    return used


def _secant(points: dict[int, _Point], lo: int, hi: int | None, usable: int, max_batch: int) -> int | None:
    """Batch predicted to just fit by the line through the nearest fitting and failing peaks."""
    ref = hi if hi is not None else max(b for b in points if b != lo) if len(points) > 1 else None
    if ref is None:
        return min(max_batch, lo * 2)
    slope = (points[ref].used - points[lo].used) / (ref - lo)
    if slope <= 0:
        return min(max_batch, hi - 1 if hi else max_batch)
    guess = lo + math.floor((usable - points[lo].used) / slope)
    if hi is None and ref < lo and guess == lo:
        # The line through two verified points says one more row no longer fits: a failing trace
        # would only confirm it (the plan is always a verified point, so stopping here is safe).
        return None
    upper = (hi - 1) if hi is not None else max_batch
    return max(lo + 1, min(guess, upper))
