"""estimate_training_memory: trace training on fake tensors, then account for the device."""

from __future__ import annotations

import contextlib
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._pytree import tree_flatten

from workers.memory import cuda_model, recurrent
from workers.memory.checkpointing import apply_activation_checkpointing
from workers.memory.loop import Batch, LossFn, Stepper, run_training
from workers.memory.optimizers import OptimizerConfig, OptimizerSpec, build_optimizer, optimizer_name
from workers.memory.step_replay import ReplayMismatch, StepRecorder, StepReplay, StepReplayer
from workers.memory.trace import (
    AllocationRecorder,
    MetaKernelFakeMode,
    PeakTally,
    Trace,
    classify_after_step,
    fake_batch,
    fake_model,
    register_initial_state,
)


@dataclass(frozen=True)
class MemoryEstimate:
    """Predicted peak memory of a training job.

    ``breakdown`` holds the live bytes per category at the moment of peak allocation (they sum to
    ``peak_allocated_bytes``), plus ``allocator_cache`` (reserved but unallocated bytes at the
    peak of reserved memory) and, for CUDA, ``cuda_context``: the driver context, which is not
    part of ``peak_reserved_bytes`` but is needed to place the job on a GPU.
    """

    peak_allocated_bytes: int
    peak_reserved_bytes: int
    breakdown: dict[str, int]
    device: str
    batch_size: int | None
    amp: str | None
    accumulation_steps: int
    checkpointing: bool
    optimizer: str
    iterations: int
    trace_events: int
    estimate_seconds: float
    traced_on: str = "cpu"
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def device_total_bytes(self) -> int:
        """What the job takes from a GPU's memory: reserved bytes plus the CUDA context."""
        return self.peak_reserved_bytes + self.breakdown.get("cuda_context", 0)


def estimate_training_memory(
    model: torch.nn.Module,
    example_batch: Batch,
    *,
    loss_fn: LossFn | None = None,
    optimizer: OptimizerSpec = "adam",
    amp: str | None = None,
    device: str = "cuda",
    iterations: int = 3,
    accumulation_steps: int = 1,
    checkpointing: bool = False,
    cuda_target: cuda_model.CudaTarget | None = None,
    capacity_bytes: int | None = None,
    fast_recurrent: bool = True,
) -> MemoryEstimate:
    """Predict the peak memory of training ``model`` on ``example_batch``.

    Runs ``iterations`` real training iterations (see :mod:`workers.memory.loop`) on fake
    tensors. ``device="cpu"`` gives the peak of live tensor bytes; ``device="cuda"`` replays
    the allocations through the caching-allocator simulator and adds CUDA workspaces.
    ``capacity_bytes`` (CUDA only: the GPU's total memory, of which the CUDA context takes its share
    first) makes the simulator flush its cache and raise
    ``SimulatedOutOfMemory`` like the real allocator would on a GPU of that size.
    ``fast_recurrent`` replaces RNN/GRU/LSTM layers by their per-time-step memory profile
    (:mod:`workers.memory.recurrent`); ``False`` traces every time step (the reference).
    """
    return estimate_and_trace(
        model,
        example_batch,
        loss_fn=loss_fn,
        optimizer=optimizer,
        amp=amp,
        device=device,
        iterations=iterations,
        accumulation_steps=accumulation_steps,
        checkpointing=checkpointing,
        cuda_target=cuda_target,
        capacity_bytes=capacity_bytes,
        fast_recurrent=fast_recurrent,
    )[0]


def estimate_and_trace(
    model: torch.nn.Module,
    example_batch: Batch,
    *,
    loss_fn: LossFn | None = None,
    optimizer: OptimizerSpec = "adam",
    amp: str | None = None,
    device: str = "cuda",
    iterations: int = 3,
    accumulation_steps: int = 1,
    checkpointing: bool = False,
    cuda_target: cuda_model.CudaTarget | None = None,
    capacity_bytes: int | None = None,
    fast_recurrent: bool = True,
    step_replay: StepReplay | None = None,
) -> tuple[MemoryEstimate, Trace]:
    """:func:`estimate_training_memory` and the allocation trace it was computed from (the planner
    extrapolates traces in the batch size). ``step_replay``: the ``trace.step_replay`` of an earlier
    trace of the same model, optimizer and device, whose optimizer steps this trace emits instead of
    running them (``workers.memory.step_replay``; a step they do not match is traced in full)."""
    if device not in ("cpu", "cuda"):
        raise ValueError("device must be 'cpu' or 'cuda'")
    if iterations < 2:
        raise ValueError("at least two iterations: optimizer state appears at the first step")
    started = time.perf_counter()
    target = (cuda_target or cuda_model.CudaTarget()) if device == "cuda" else None
    args = (
        model,
        example_batch,
        loss_fn,
        optimizer,
        amp,
        iterations,
        accumulation_steps,
        checkpointing,
        target,
    )
    try:
        trace, traced_on = _trace(*args, fast_recurrent, step_replay)
    except ReplayMismatch:
        trace, traced_on = _trace(*args, fast_recurrent, None)
    if target is None:
        allocated, reserved, breakdown = _cpu_accounting(trace)
    else:
        allocated, reserved, breakdown = cuda_model.simulate(trace, target, capacity_bytes)
    estimate = MemoryEstimate(
        peak_allocated_bytes=allocated,
        peak_reserved_bytes=reserved,
        breakdown=breakdown,
        device=device,
        batch_size=batch_size_of(example_batch),
        amp=amp,
        accumulation_steps=accumulation_steps,
        checkpointing=checkpointing,
        optimizer=optimizer_name(optimizer),
        iterations=iterations,
        trace_events=len(trace.events),
        estimate_seconds=time.perf_counter() - started,
        traced_on=traced_on,
        notes=cuda_model.notes(target, traced_on) if target else (),
    )
    return estimate, trace


def batch_size_of(batch: Batch) -> int | None:
    for leaf in tree_flatten(batch)[0]:
        if isinstance(leaf, torch.Tensor) and leaf.dim() > 0:
            return int(leaf.shape[0])
    return None


def _trace(
    model: torch.nn.Module,
    batch: Batch,
    loss_fn: LossFn | None,
    optimizer: OptimizerSpec,
    amp: str | None,
    iterations: int,
    accumulation_steps: int,
    checkpointing: bool,
    target: cuda_model.CudaTarget | None,
    fast_recurrent: bool = True,
    step_replay: StepReplay | None = None,
) -> tuple[Trace, str]:
    trace = Trace()
    recorder = AllocationRecorder(trace)
    # oneDNN kernels only run when the job trains on the CPU.
    recorder.cpu_kernel_corrections = target is None
    fake_mode = MetaKernelFakeMode(allow_non_fake_inputs=False)
    traced_on = "cpu"
    fmodel = fake_model(model, fake_mode)
    fbatch = fake_batch(batch, fake_mode)
    if target is not None and cuda_model.can_trace_on_cuda():
        fmodel, fbatch = cuda_model.move_to_fake_cuda(fmodel, fbatch, fake_mode)
        traced_on = "cuda"
        recorder.host_device_type = "cpu"
    if checkpointing:
        apply_activation_checkpointing(fmodel)
    if fast_recurrent:
        recurrent.install(fmodel, fake_mode, recorder)
    with fake_mode, cuda_model.emulation(recorder, target, traced_on):
        params = [p for p in fmodel.parameters() if p.requires_grad]
        # A GPU run defaults to the multi-tensor (foreach) optimizers; model that even on CPU.
        opt = build_optimizer(params, optimizer, foreach=True if target is not None else None)
        stepper: Stepper = opt
        if isinstance(optimizer, str | OptimizerConfig):  # a callable's step may depend on anything
            if step_replay is None:
                stepper = StepRecorder(opt, params)
            else:
                stepper = StepReplayer(opt, params, step_replay, recorder)
        register_initial_state(recorder, fmodel, fbatch)
        # Emulating CUDA on a CPU trace: CPU autocast stays off (asking run_training for CUDA
        # autocast on a CPU build disables it, with a warning) and CUDA's casts are applied by
        # cuda_model.autocast_emulation in each forward pass.
        emulate_amp = amp if (target is not None and traced_on == "cpu") else None
        with recorder, warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="CUDA is not available")
            run_training(
                fmodel,
                fbatch,
                stepper,
                loss_fn=loss_fn,
                iterations=iterations,
                accumulation_steps=accumulation_steps,
                amp=amp,
                device_type="cuda" if emulate_amp else traced_on,
                phase=_phase_hook(recorder, fmodel, opt, emulate_amp),
                stop_after=_stop_rule(stepper, trace, iterations, _repeats_when_steady(target, optimizer)),
            )
        recorder.closed = True  # the fake model's own teardown is not part of training
    if isinstance(stepper, StepRecorder):
        trace.step_replay = stepper.replay(trace)
    elif isinstance(stepper, StepReplayer):
        trace.step_replay = step_replay
    return trace, traced_on


def _repeats_when_steady(target: cuda_model.CudaTarget | None, optimizer: OptimizerSpec) -> bool:
    # Live bytes only depend on what is alive, so once an iteration leaves exactly what the one
    # before left, the remaining ones repeat it, provided the step depends on tensor shapes
    # alone: the built-in optimizers, not a callable's (it may branch on a Python step count).
    # The allocator replay of a CUDA estimate also depends on its cache: all iterations there.
    return target is None and isinstance(optimizer, str | OptimizerConfig)


def _stop_rule(stepper: Stepper, trace: Trace, iterations: int, steady: bool) -> Callable[[int], bool] | None:
    """When to end the traced run: at the steady state (live bytes), or after iteration 0 when a
    replayed run writes its iteration 1 from its iteration 0 (``step_replay``)."""
    rule = _SteadyState(trace) if steady else None
    if (
        not isinstance(stepper, StepReplayer)
        or not stepper.recording.repeats
        or not (steady or iterations == 2)
    ):
        return rule

    def after_first(iteration: int) -> bool:
        if rule is not None:
            rule(iteration)
        stepper.repeat_first_iteration()
        if rule is not None and not rule(1):
            raise ReplayMismatch("the repeated iteration is not the steady state")
        return True

    return after_first


class _SteadyState:
    """Says, after each iteration, whether it left the same live storages (category and size)
    as the iteration before it."""

    def __init__(self, trace: Trace) -> None:
        self.trace = trace
        self.live: dict[int, int] = {}
        self.seen = 0
        self.previous: Counter[tuple[str, int]] | None = None

    def __call__(self, iteration: int) -> bool:
        for event in self.trace.events[self.seen :]:
            if event.nbytes > 0:
                self.live[event.sid] = event.nbytes
            else:
                self.live.pop(event.sid, None)
        self.seen = len(self.trace.events)
        category = self.trace.category
        left = Counter((category.get(sid, ""), nbytes) for sid, nbytes in self.live.items())
        steady = left == self.previous
        self.previous = left
        return steady


def _phase_hook(  # type: ignore[no-untyped-def]
    recorder: AllocationRecorder, model: torch.nn.Module, opt: torch.optim.Optimizer, emulate_amp: str | None
):
    @contextlib.contextmanager
    def hook(name: str, iteration: int) -> Iterator[None]:
        autocast = cuda_model.autocast_emulation(emulate_amp if name == "forward" else None)
        with recorder.in_phase(name, iteration), autocast:
            yield
        if name in ("backward", "optimizer"):
            classify_after_step(recorder, model, opt)

    return hook


def _cpu_accounting(trace: Trace) -> tuple[int, int, dict[str, int]]:
    """Peak of live bytes; the breakdown is taken at that peak."""
    tally = PeakTally(trace.category)
    for event in trace.events:
        tally.add(event.sid, event.nbytes)
    return tally.peak, tally.peak, tally.breakdown()


def describe(estimate: MemoryEstimate) -> dict[str, Any]:
    return {
        "peak_allocated_bytes": estimate.peak_allocated_bytes,
        "peak_reserved_bytes": estimate.peak_reserved_bytes,
        **estimate.breakdown,
    }
