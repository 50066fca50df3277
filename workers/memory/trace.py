"""Record the storage allocations and frees of a training run on fake tensors.

Fake tensors (``FakeTensorMode``) carry shapes, dtypes and storages but no data, so no memory is
allocated and no FLOPs run. A ``TorchDispatchMode`` placed above the fake mode sees every ATen op;
a storage it has not seen before is an allocation, and a weakref finalizer on the untyped storage
reports its free at the exact point the program drops it (storages keep one Python object for their
lifetime, so the finalizer fires when the C++ storage dies).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import weakref
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from torch._subclasses.fake_tensor import FakeCopyMode, FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map_only

from workers.memory.cpu_kernels import correct_output, held_buffer, needs_correction

if TYPE_CHECKING:
    from workers.memory.step_replay import StepReplay

PHASE_CATEGORY = {
    "setup": "other",
    "forward": "activations",
    "backward": "temporaries",
    "optimizer": "temporaries",
    "zero_grad": "temporaries",
}
_DEVICE_QUERY = torch.ops.prim.device.default
_CAST_OPS = {"aten._to_copy.default", "aten.to.dtype", "aten.to.dtype_layout"}


@dataclass(frozen=True)
class Event:
    """One allocation (``nbytes`` > 0) or free (``nbytes`` < 0) of storage ``sid``."""

    sid: int
    nbytes: int
    op: str
    phase: str
    iteration: int


@dataclass
class Trace:
    events: list[Event] = field(default_factory=list)
    category: dict[int, str] = field(default_factory=dict)
    initial: list[int] = field(default_factory=list)  # sids live before training starts
    host: set[int] = field(default_factory=set)  # sids that stay in host memory on a GPU run
    # The run's optimizer steps, for the next trace of the same model to replay (None: not replayable).
    step_replay: StepReplay | None = None


class AllocationRecorder(TorchDispatchMode):
    """Turns the outputs of every dispatched op into allocation/free events."""

    def __init__(self, trace: Trace) -> None:
        super().__init__()
        self.trace = trace
        self.phase = "setup"
        self.iteration = 0
        self._live: dict[int, tuple[int, int, weakref.ref[Any]]] = {}  # id(storage) -> sid, size
        self._param_storages: set[int] = set()
        self._next_sid = 0
        self.closed = False
        self.cpu_kernel_corrections = False
        # When tracing on fake CUDA tensors, CPU tensors (optimizer step counters, host-side
        # index tensors) are not GPU memory.
        self.host_device_type: str | None = None
        self.op_hooks: list[Callable[[str, tuple[Any, ...], Any], None]] = []

    # -- registration ------------------------------------------------------------------------
    def register(self, tensor: torch.Tensor, category: str, *, is_param: bool = False) -> None:
        """Mark a tensor that exists before training (parameter, buffer, batch) as live."""
        storage = tensor.untyped_storage()
        if id(storage) in self._live:
            return
        sid = self._track(storage, "initial")
        if sid is not None:
            self.trace.initial.append(sid)
            self.trace.category[sid] = category
            if is_param:
                self._param_storages.add(id(storage))

    def sid_of(self, tensor: torch.Tensor) -> int | None:
        entry = self._live.get(id(tensor.untyped_storage()))
        return entry[0] if entry else None

    @contextlib.contextmanager
    def in_phase(self, phase: str, iteration: int) -> Iterator[None]:
        previous = self.phase, self.iteration
        self.phase, self.iteration = phase, iteration
        try:
            yield
        finally:
            self.phase, self.iteration = previous

    def emit(self, nbytes: int, op: str, category: str) -> int:
        """Insert a synthetic allocation (e.g. a CUDA workspace) with no tensor behind it."""
        sid = self._new_sid()
        self.trace.events.append(Event(sid, nbytes, op, self.phase, self.iteration))
        self.trace.category[sid] = category
        return sid

    def emit_free(self, sid: int, nbytes: int, op: str) -> None:
        self.trace.events.append(Event(sid, -nbytes, op, self.phase, self.iteration))

    # -- dispatch ----------------------------------------------------------------------------
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        out = func(*args, **(kwargs or {}))
        if func is _DEVICE_QUERY:
            return out  # no storage; the autograd engine asks ~1,000 times per text-model iteration
        op = str(func)
        scratch = 0
        if self.cpu_kernel_corrections and needs_correction(op):
            out, scratch = correct_output(op, args, out)
        for hook in self.op_hooks:
            hook(op, args, out)
        for tensor in tree_flatten(out)[0]:
            if isinstance(tensor, torch.Tensor):
                self._observe(tensor, op, args)
        if scratch:
            # Kernel-internal scratch: live only during the op, on top of its outputs.
            sid = self.emit(scratch, op, "workspace")
            self.emit_free(sid, scratch, op)
        if self.cpu_kernel_corrections and isinstance(out, torch.Tensor):
            self._hold_with(out, held_buffer(op, args), op)
        return out

    def _hold_with(self, out: torch.Tensor, nbytes: int, op: str) -> None:
        """A kernel-internal buffer that lives exactly as long as ``out``'s storage."""
        if nbytes <= 0:
            return
        sid = self.emit(nbytes, op, self._category(op, ()))

        def release() -> None:
            if not self.closed:
                self.emit_free(sid, nbytes, "free")

        weakref.finalize(out.untyped_storage(), release)

    def _observe(self, tensor: torch.Tensor, op: str, args: tuple[Any, ...]) -> None:
        storage = tensor.untyped_storage()
        entry = self._live.get(id(storage))
        if entry is None:
            sid = self._track(storage, op)
            if sid is not None:
                self.trace.category[sid] = self._category(op, args)
                if tensor.device.type == self.host_device_type:
                    self.trace.host.add(sid)
        elif entry[1] != storage.nbytes():
            self._resize(storage, entry, op)

    def _category(self, op: str, args: tuple[Any, ...]) -> str:
        # Autocast keeps low-precision copies of the weights for the whole forward pass.
        if self.phase == "forward" and op in _CAST_OPS and args:
            src = args[0]
            if isinstance(src, torch.Tensor) and id(src.untyped_storage()) in self._param_storages:
                return "amp_weight_cache"
        return PHASE_CATEGORY[self.phase]

    def _track(self, storage: torch.UntypedStorage, op: str) -> int | None:
        nbytes = storage.nbytes()
        if nbytes == 0:
            return None
        sid = self._new_sid()
        key = id(storage)
        ref = weakref.ref(storage, self._finalizer(key, sid))
        self._live[key] = (sid, nbytes, ref)
        self.trace.events.append(Event(sid, nbytes, op, self.phase, self.iteration))
        return sid

    def _finalizer(self, key: int, sid: int) -> Callable[[Any], None]:
        def on_free(_ref: Any) -> None:
            entry = self._live.get(key)
            if entry is not None and entry[0] == sid and not self.closed:
                del self._live[key]
                self.trace.events.append(Event(sid, -entry[1], "free", self.phase, self.iteration))

        return on_free

    def _resize(self, storage: torch.UntypedStorage, entry: tuple[int, int, Any], op: str) -> None:
        # A storage resize allocates the new buffer, copies, then frees the old one (CUDA and CPU
        # allocators alike), so both are alive for a moment.
        sid, nbytes, _ = entry
        category = self.trace.category.get(sid, PHASE_CATEGORY[self.phase])
        del self._live[id(storage)]
        new_sid = self._track(storage, op)
        if new_sid is not None:
            self.trace.category[new_sid] = category
        self.trace.events.append(Event(sid, -nbytes, op, self.phase, self.iteration))

    def _new_sid(self) -> int:
        self._next_sid += 1
        return self._next_sid

    def live_sids(self) -> dict[int, int]:
        return {sid: nbytes for sid, nbytes, _ in self._live.values()}


# -- fake copies of the model and the batch ----------------------------------------------------
class MetaKernelFakeMode(FakeTensorMode):
    """A fake mode that runs an op's registered Meta kernel (ATen's structured meta functions, the
    shape logic the real CPU kernel runs) where FakeTensorMode would run the op's Python
    decomposition instead: one native call rather than a dozen fake sub-ops through Python (a cold
    trace of the bench's text and embedding models took 20-30% less CPU; gelu_backward, addmm,
    nll_loss, log_softmax and layer_norm_backward were decomposed). fp32 traces of the bench's deep
    models and of the memory zoo (CPU and CUDA targets) are identical event for event; under CPU
    bf16 autocast BatchNorm's saved mean and invstd now come out fp32, as ATen's CPU kernel
    allocates them (the decomposition said bf16: half the bytes)."""

    def cpp_meta_supports_symint(self, func: Any) -> bool:
        return super().cpp_meta_supports_symint(func) or _has_meta_kernel(func.name())


@functools.cache
def _has_meta_kernel(name: str) -> bool:
    return bool(torch._C._dispatch_has_kernel_for_dispatch_key(name, "Meta"))


def fake_model(model: torch.nn.Module, fake_mode: FakeTensorMode) -> torch.nn.Module:
    """A deep copy whose parameters and buffers are fake: the user's model is never touched."""
    with FakeCopyMode(fake_mode):
        return copy.deepcopy(model)


def fake_batch(batch: Any, fake_mode: FakeTensorMode) -> Any:
    if isinstance(batch, Mapping) and not isinstance(batch, dict):
        batch = dict(batch)  # e.g. transformers' BatchEncoding, which pytree does not flatten
    return tree_map_only(torch.Tensor, fake_mode.from_tensor, batch)


def register_initial_state(recorder: AllocationRecorder, model: torch.nn.Module, batch: Any) -> None:
    """Parameters, then buffers, then the batch: the order a job puts them on the device."""
    for param in model.parameters():
        recorder.register(param, "parameters", is_param=True)
    for buf in model.buffers():
        recorder.register(buf, "buffers")
    for tensor in tree_flatten(batch)[0]:
        if isinstance(tensor, torch.Tensor):
            recorder.register(tensor, "inputs")


def classify_after_step(
    recorder: AllocationRecorder, model: torch.nn.Module, optimizer: torch.optim.Optimizer
) -> None:
    """Storages that survive as ``.grad`` or optimizer state get their real category."""
    for param in model.parameters():
        if param.grad is not None:
            _relabel(recorder, param.grad, "gradients")
    for state in optimizer.state.values():
        for value in state.values():
            if isinstance(value, torch.Tensor):
                _relabel(recorder, value, "optimizer_state")
                if value.dim() == 0:
                    _mark_host(recorder, value)


def _relabel(recorder: AllocationRecorder, tensor: torch.Tensor, category: str) -> None:
    sid = recorder.sid_of(tensor)
    if sid is not None:
        recorder.trace.category[sid] = category


def _mark_host(recorder: AllocationRecorder, tensor: torch.Tensor) -> None:
    # Adam's `step` counters are CPU tensors when the parameters are on a GPU.
    sid = recorder.sid_of(tensor)
    if sid is not None:
        recorder.trace.host.add(sid)


CATEGORIES = (
    "parameters",
    "buffers",
    "inputs",
    "gradients",
    "optimizer_state",
    "activations",
    "amp_weight_cache",
    "temporaries",
    "workspace",
    "other",
)


class PeakTally:
    """Running bytes per category, snapshotting the per-category totals at each new peak."""

    def __init__(self, category: dict[int, str]) -> None:
        self.category = category
        self.current = 0
        self.peak = 0
        self.totals = dict.fromkeys(CATEGORIES, 0)
        self._at_peak = dict(self.totals)

    def add(self, sid: int, nbytes: int) -> None:
        name = self.category.get(sid, "other")
        self.totals[name] = self.totals.get(name, 0) + nbytes
        self.current += nbytes
        if self.current > self.peak:
            self.peak = self.current
            self._at_peak = dict(self.totals)

    def breakdown(self) -> dict[str, int]:
        return dict(self._at_peak)
