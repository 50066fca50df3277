"""What changes when the traced training runs on a CUDA GPU.

With a CUDA build of torch and a visible GPU the trace runs on fake ``cuda:0`` tensors, so the
dispatcher picks the CUDA kernels, the CUDA autocast policy and the foreach optimizers by itself.
With the CPU build (autograd on fake CUDA tensors aborts the process there) the trace runs on fake
CPU tensors and the known differences are modelled explicitly:

- training-mode dropout: CUDA runs the fused ``native_dropout`` (bool mask, 1 byte/element); the CPU
  composite keeps a mask of the input's dtype (4 bytes/element in fp32). Emulated by routing
  ``F.dropout`` to ``native_dropout``.
- autocast: CPU autocast keeps layer_norm/group_norm/softmax/log_softmax in bf16/fp16; CUDA's
  policy runs them in fp32. Emulated on ``torch.nn.functional`` while tracing.
- optimizers: CUDA defaults to the multi-tensor (foreach) implementations, whose temporaries are
  whole lists of parameter-sized tensors; the estimator builds them with ``foreach=True``.
- Adam's ``step`` counters stay on the host.
- cuBLAS workspace: one per (handle, stream), allocated through the caching allocator on the first
  matmul of each thread and kept; the autograd engine runs CUDA backward on its own thread with its
  own handle, so forward and backward each get one (32 MiB on sm90+, 8 MiB + 128 KiB before).
- cuDNN convolution workspace: a transient allocation around each convolution (fwd and bwd).
  Its size depends on the algorithm cuDNN picks at run time; ``conv_workspace_ratio`` of the
  largest tensor involved is an uncalibrated allowance.
- every allocation goes through the caching allocator simulator (rounding, pools, segments).
- the CUDA context is not allocator memory: reported as ``cuda_context`` beside the peaks.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils._pytree import tree_flatten, tree_map_only

from workers.memory.allocator import UNLIMITED, CachingAllocatorSimulator
from workers.memory.trace import AllocationRecorder, PeakTally, Trace

MIB = 1024 * 1024
_MATMUL_OPS = {
    "aten.mm.default",
    "aten.addmm.default",
    "aten.bmm.default",
    "aten.baddbmm.default",
    "aten.addbmm.default",
    "aten.addmv.default",
    "aten.mv.default",
    "aten._addmm_activation.default",
}
_CONV_OPS = {"aten.convolution.default", "aten.convolution_backward.default"}


@dataclass(frozen=True)
class CudaTarget:
    """The GPU a job will run on, as far as memory accounting is concerned."""

    compute_capability: tuple[int, int] = (9, 0)
    context_bytes: int = 512 * MIB
    conv_workspace_ratio: float = 0.25
    max_split_size: int = UNLIMITED

    @property
    def cublas_workspace_bytes(self) -> int:
        # CublasHandlePool.cpp default CUBLAS_WORKSPACE_CONFIG: ":4096:8" on Hopper and newer,
        # ":4096:2:16:8" before.
        if self.compute_capability[0] >= 9:
            return 4096 * 1024 * 8
        return 4096 * 1024 * 2 + 16 * 1024 * 8


def can_trace_on_cuda() -> bool:
    return torch.cuda.is_available()


def notes(target: CudaTarget, traced_on: str) -> tuple[str, ...]:
    if traced_on == "cuda":
        return ("traced on fake cuda:0 tensors",)
    return ("CPU build of torch: CUDA kernels, dropout and optimizer defaults modelled",)


# -- tracing on fake CUDA tensors (CUDA builds) -------------------------------------------------
def move_to_fake_cuda(model: torch.nn.Module, batch: Any, fake_mode: Any) -> tuple[Any, Any]:
    memo: dict[int, torch.Tensor] = {}
    with fake_mode:
        for module in model.modules():
            for name, param in list(module._parameters.items()):
                if param is not None:
                    setattr(module, name, memo.setdefault(id(param), _cuda_param(param)))
            for name, buf in list(module._buffers.items()):
                if buf is not None:
                    module._buffers[name] = memo.setdefault(id(buf), _cuda_like(buf))
        batch = tree_map_only(torch.Tensor, _cuda_like, batch)
    return model, batch


def _cuda_like(t: torch.Tensor) -> torch.Tensor:
    return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="cuda:0")


def _cuda_param(p: torch.nn.Parameter) -> torch.nn.Parameter:
    return torch.nn.Parameter(_cuda_like(p), requires_grad=p.requires_grad)


# -- emulation while tracing ---------------------------------------------------------------------
@contextlib.contextmanager
def _cuda_dropout() -> Iterator[None]:
    """Route training-mode ``F.dropout`` to the fused kernel CUDA uses (bool mask).

    Patched on the module rather than through a TorchFunctionMode: a mode is popped while it
    handles ``Tensor.backward``, so checkpoint recomputation inside backward would escape it and
    recompute with a different mask dtype. Process-wide while the trace runs (fake tensors only).
    """
    original = F.dropout

    def dropout(input: Any, p: float = 0.5, training: bool = True, inplace: bool = False) -> Any:
        if training and 0.0 < p < 1.0 and not inplace and input.numel() > 0:
            return torch.native_dropout(input, p, True)[0]
        return original(input, p, training, inplace)

    F.dropout = dropout  # type: ignore[assignment]
    try:
        yield
    finally:
        F.dropout = original


@contextlib.contextmanager
def _cuda_autocast_policy() -> Iterator[None]:
    """Under CPU autocast, give normalizations and softmaxes CUDA autocast's fp32 outputs.

    CUDA autocast runs layer_norm/group_norm in fp32 (casting the input: a new fp32 tensor) and
    softmax/log_softmax with dtype=float32; CPU autocast keeps all four in the low precision.
    Patched on ``torch.nn.functional`` for the same reason as dropout.
    """
    originals = {name: getattr(F, name) for name in ("layer_norm", "group_norm", "softmax", "log_softmax")}

    def autocasting(x: Any) -> bool:
        return (
            torch.is_autocast_enabled("cpu")
            and isinstance(x, torch.Tensor)
            and x.dtype in (torch.bfloat16, torch.float16)
        )

    def norm(name: str) -> Any:
        def run(input: Any, *args: Any, **kwargs: Any) -> Any:
            if not autocasting(input):
                return originals[name](input, *args, **kwargs)
            with torch.autocast("cpu", enabled=False):
                return originals[name](input.float(), *args, **kwargs)

        return run

    def softmax(name: str) -> Any:
        def run(input: Any, dim: Any = None, _stacklevel: int = 3, dtype: Any = None) -> Any:
            if dtype is None and autocasting(input):
                dtype = torch.float32
            return originals[name](input, dim, _stacklevel, dtype)

        return run

    patches = {"layer_norm": norm("layer_norm"), "group_norm": norm("group_norm")}
    patches |= {"softmax": softmax("softmax"), "log_softmax": softmax("log_softmax")}
    for name, fn in patches.items():
        setattr(F, name, fn)
    try:
        yield
    finally:
        for name, fn in originals.items():
            setattr(F, name, fn)


class _Workspaces:
    """Inserts cuBLAS and cuDNN workspace allocations into the trace next to the ops needing them."""

    def __init__(self, recorder: AllocationRecorder, target: CudaTarget) -> None:
        self.recorder = recorder
        self.target = target
        self._threads_with_cublas: set[str] = set()

    def __call__(self, op: str, args: tuple[Any, ...], out: Any) -> None:
        if op in _MATMUL_OPS:
            self._cublas()
        elif op in _CONV_OPS:
            self._conv(args, out)

    def _cublas(self) -> None:
        thread = "autograd" if self.recorder.phase == "backward" else "main"
        if thread not in self._threads_with_cublas:
            self._threads_with_cublas.add(thread)
            self.recorder.emit(self.target.cublas_workspace_bytes, "cublas_workspace", "workspace")

    def _conv(self, args: tuple[Any, ...], out: Any) -> None:
        tensors = [t for t in tree_flatten((args, out))[0] if isinstance(t, torch.Tensor)]
        largest = max((t.numel() * t.element_size() for t in tensors), default=0)
        nbytes = int(largest * self.target.conv_workspace_ratio)
        if nbytes > 0:
            sid = self.recorder.emit(nbytes, "cudnn_workspace", "workspace")
            self.recorder.emit_free(sid, nbytes, "cudnn_workspace")


@contextlib.contextmanager
def emulation(recorder: AllocationRecorder, target: CudaTarget | None, traced_on: str) -> Iterator[None]:
    if target is None:
        yield
        return
    recorder.op_hooks.append(_Workspaces(recorder, target))
    if traced_on != "cpu":
        yield
        return
    with _cuda_dropout(), _cuda_autocast_policy():
        yield


# -- replay through the caching allocator -------------------------------------------------------
def simulate(trace: Trace, target: CudaTarget, capacity_bytes: int | None) -> tuple[int, int, dict[str, int]]:
    """Peak allocated, peak reserved and the breakdown at peak allocation, in allocator bytes."""
    sim = CachingAllocatorSimulator(
        capacity=capacity_bytes or UNLIMITED, max_split_size=target.max_split_size
    )
    tally = PeakTally(trace.category)
    handles: dict[int, int] = {}
    for event in trace.events:
        if event.sid in trace.host or _host_scalar(event, trace):
            continue
        if event.nbytes > 0:
            handles[event.sid] = sim.malloc(event.nbytes)
            tally.add(event.sid, sim.allocated_size(handles[event.sid]))
        elif event.sid in handles:
            handle = handles.pop(event.sid)
            tally.add(event.sid, -sim.allocated_size(handle))
            sim.free(handle)
    breakdown = tally.breakdown()
    breakdown["allocator_cache"] = sim.stats.peak_reserved - sim.stats.peak_allocated
    breakdown["cuda_context"] = target.context_bytes
    return sim.stats.peak_allocated, sim.stats.peak_reserved, breakdown


def _host_scalar(event: Any, trace: Trace) -> bool:
    # Scalars the foreach optimizers build with torch.tensor(..., device="cpu").
    return event.phase == "optimizer" and 0 < event.nbytes <= 8 and event.op.startswith("aten.lift")
