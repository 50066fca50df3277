"""What changes when the traced training runs on a CUDA GPU.

With a CUDA build of torch and a visible GPU the trace runs on fake ``cuda:0`` tensors, so the
dispatcher picks the CUDA kernels, the CUDA autocast policy and the foreach optimizers by itself.
With the CPU build (autograd on fake CUDA tensors aborts the process there) the trace runs on fake
CPU tensors and the known differences are modelled explicitly:

- training-mode dropout: CUDA runs the fused ``native_dropout`` (bool mask, 1 byte/element); the CPU
  composite keeps a mask of the input's dtype (4 bytes/element in fp32). Emulated by routing
  ``F.dropout`` to ``native_dropout``.
- autocast: CPU and CUDA autocast have different op lists. The trace runs without CPU autocast and
  applies CUDA's: the ops are those with an AutocastCUDA kernel in the installed torch, and each
  one's cast is probed on fake CUDA tensors under CUDA autocast (``autocast_emulation``). Like
  ``torch.utils.checkpoint``, which re-enters the forward's autocast state to recompute, a block
  checkpointed under the emulated autocast is recomputed under it (with a fresh weight cache).
- optimizers: CUDA defaults to the multi-tensor (foreach) implementations, whose temporaries are
  whole lists of parameter-sized tensors; the estimator builds them with ``foreach=True``.
- Adam's ``step`` counters stay on the host.
- cuBLAS / cuBLASLt workspaces: one per (handle, stream), allocated through the caching allocator on
  the first matmul of each thread and kept; the autograd engine runs CUDA backward on its own thread
  with its own handle, so forward and backward each get one. Sizes, sharing and caching follow the
  target's torch version, architecture and environment (``blas_workspace``).
- cuDNN convolution workspace: a transient allocation around each convolution (fwd and bwd).
  Its size depends on the algorithm cuDNN picks at run time; ``conv_workspace_ratio`` of the
  largest tensor involved is an uncalibrated allowance.
- every allocation goes through the caching allocator simulator (rounding, pools, segments).
- the CUDA context is not allocator memory: reported as ``cuda_context`` beside the peaks.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterator
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import torch
import torch.nn.functional as F
import torch.utils.checkpoint as torch_checkpoint
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import _disable_current_modes
from torch.utils._pytree import tree_flatten, tree_map_only

from workers.memory import blas_workspace, cuda_attention
from workers.memory.allocator import UNLIMITED, CachingAllocatorSimulator
from workers.memory.loop import AMP_DTYPES
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
    # PyTorch puts cuDNN attention first on sm90/sm100 when the runtime cuDNN is newer than 9.15.
    prefer_cudnn_attention: bool = False

    # The job's torch and environment, for the BLAS workspaces; None: this process's.
    torch_version: str = torch.__version__
    workspace_env: tuple[tuple[str, str], ...] | None = None
    cublas_workspace_override: int | None = None  # torch.backends.cuda.cublas_workspace_size(n)
    cublaslt_workspace_override: int | None = None

    @property
    def blas_workspaces(self) -> blas_workspace.BlasWorkspaces:
        env = dict(self.workspace_env) if self.workspace_env is not None else dict(os.environ)
        return blas_workspace.resolve(
            torch_version=self.torch_version,
            compute_capability=self.compute_capability,
            env=env,
            cublas_override=self.cublas_workspace_override,
            cublaslt_override=self.cublaslt_workspace_override,
        )

    @property
    def cublas_workspace_bytes(self) -> int:
        return self.blas_workspaces.cublas_bytes


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


def cuda_autocast_ops() -> frozenset[str]:
    """Names of the ATen ops CUDA autocast handles, from the installed torch's own registrations
    (every op with a kernel for the AutocastCUDA dispatch key; present in CPU builds too)."""
    return _autocast_ops()


@functools.cache
def _autocast_ops() -> frozenset[str]:
    names = set()
    for name in torch._C._dispatch_get_all_op_names():
        if name.startswith("aten::") and torch._C._dispatch_has_kernel_for_dispatch_key(name, "AutocastCUDA"):
            names.add(name[len("aten::") :].split(".")[0])
    return frozenset(names)


_ACTIVE_AUTOCAST: list[torch.dtype] = []  # the emulated autocasts entered, innermost last


class _CudaAutocast(TorchFunctionMode):
    """CUDA autocast's casts on a trace of fake CPU tensors.

    Every torch function whose ATen op CUDA autocast handles gets its floating inputs cast to the
    dtype the installed torch's CUDA autocast gives its result (probed once per function and input
    dtypes). Casts of fp32 leaf parameters to the low precision are cached for the forward pass,
    as autocast's weight cache does.
    """

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        self.dtype = dtype
        self.ops = cuda_autocast_ops()
        self.weight_cache: dict[int, torch.Tensor] = {}
        self.policies: dict[tuple[Any, ...], torch.dtype | None] = {}
        self._sdpa = cuda_attention.emulated_autocast(dtype)

    def __enter__(self) -> _CudaAutocast:
        self._sdpa.__enter__()  # SDPA is a lower-precision op, cast by its stand-in
        _ACTIVE_AUTOCAST.append(self.dtype)
        return super().__enter__()  # type: ignore[no-any-return]

    def __exit__(self, *exc: Any) -> None:
        super().__exit__(*exc)
        _ACTIVE_AUTOCAST.pop()
        self._sdpa.__exit__(*exc)

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "").strip("_")
        if name in self.ops or name == "rpow":
            target = self._policy(func, args, kwargs)
            if target is not None:
                args, kwargs = tree_map_only(torch.Tensor, lambda t: self._cast(t, target), (args, kwargs))
        return func(*args, **kwargs)

    def _cast(self, t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        if not t.is_floating_point() or t.dtype == dtype or t.dtype == torch.float64:
            return t
        if t.is_leaf and t.requires_grad and t.dtype == torch.float32 and dtype != torch.float32:
            key = id(t)
            if key not in self.weight_cache:
                self.weight_cache[key] = t.to(dtype)
            return self.weight_cache[key]
        return t.to(dtype)

    def _policy(self, func: Any, args: Any, kwargs: Any) -> torch.dtype | None:
        leaves = tree_flatten((args, kwargs))[0]
        key = (func, tuple((t.dtype, t.dim()) if isinstance(t, torch.Tensor) else type(t) for t in leaves))
        if key not in self.policies:
            self.policies[key] = _probe(func, args, kwargs, self.dtype)
        return self.policies[key]


def _probe(func: Any, args: Any, kwargs: Any, dtype: torch.dtype) -> torch.dtype | None:
    floating = [
        t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor) and t.is_floating_point()
    ]
    if not floating:
        return None
    previous = torch.is_autocast_enabled("cuda"), torch.get_autocast_dtype("cuda")
    try:
        with _disable_current_modes(), FakeTensorMode(allow_non_fake_inputs=True), torch.no_grad():
            fake = tree_map_only(
                torch.Tensor,
                lambda t: torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="cuda"),
                (args, kwargs),
            )
            torch.set_autocast_enabled("cuda", True)
            torch.set_autocast_dtype("cuda", dtype)
            out = func(*fake[0], **fake[1])
    except Exception:  # the probe cannot build this call on fake CUDA tensors: leave it alone
        return None
    finally:
        torch.set_autocast_enabled("cuda", previous[0])
        torch.set_autocast_dtype("cuda", previous[1])
    results = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor) and t.is_floating_point()]
    return results[0].dtype if results else None


@contextlib.contextmanager
def autocast_emulation(amp: str | None) -> Iterator[None]:
    """CUDA autocast for one forward pass of a trace on fake CPU tensors (a no-op without amp)."""
    if amp not in AMP_DTYPES:
        yield
        return
    with _CudaAutocast(AMP_DTYPES[amp]):
        yield


def _recomputed_under_forward_autocast(function: Any) -> Any:
    """``function`` as a checkpoint recomputes it: under the emulated autocast of the forward that
    checkpointed it (captured now), entered afresh when the recompute runs outside it (backward)."""
    if not _ACTIVE_AUTOCAST:
        return function
    dtype = _ACTIVE_AUTOCAST[-1]

    def recompute(*args: Any, **kwargs: Any) -> Any:
        if _ACTIVE_AUTOCAST:
            return function(*args, **kwargs)
        with _CudaAutocast(dtype):
            return function(*args, **kwargs)

    return recompute


@contextlib.contextmanager
def _checkpoint_autocast() -> Iterator[None]:
    """Give the emulated autocast to checkpoint recomputation, reentrant or not.

    ``torch.utils.checkpoint.checkpoint`` looks both helpers up in its module at each call, so this
    also reaches checkpoint functions bound before the trace (Hugging Face's gradient
    checkpointing). Process-wide while the trace runs, as ``_cuda_dropout``.
    """
    generator = torch_checkpoint._checkpoint_without_reentrant_generator
    function_class = torch_checkpoint.CheckpointFunction

    def without_reentrant(function: Any, *args: Any, **kwargs: Any) -> Any:
        return generator(_recomputed_under_forward_autocast(function), *args, **kwargs)

    def reentrant_apply(function: Any, *args: Any) -> Any:
        return function_class.apply(_recomputed_under_forward_autocast(function), *args)

    torch_checkpoint._checkpoint_without_reentrant_generator = without_reentrant  # type: ignore[assignment]
    torch_checkpoint.CheckpointFunction = SimpleNamespace(apply=reentrant_apply)  # type: ignore[misc,assignment]
    try:
        yield
    finally:
        torch_checkpoint._checkpoint_without_reentrant_generator = generator
        torch_checkpoint.CheckpointFunction = function_class  # type: ignore[misc]


class _Workspaces:
    """Inserts cuBLAS and cuDNN workspace allocations into the trace next to the ops needing them."""

    def __init__(self, recorder: AllocationRecorder, target: CudaTarget) -> None:
        self.recorder = recorder
        self.target = target
        self.blas = target.blas_workspaces
        self._threads_with_cublas: set[str] = set()
        self._threads_with_lt: set[str] = set()

    def __call__(self, op: str, args: tuple[Any, ...], out: Any) -> None:
        if op in _MATMUL_OPS:
            self._matmul(op, args)
        elif op in _CONV_OPS:
            self._conv(args, out)

    def _matmul(self, op: str, args: tuple[Any, ...]) -> None:
        # The autograd engine runs CUDA backward on its own thread, with its own handle.
        thread = "autograd" if self.recorder.phase == "backward" else "main"
        if not _uses_cublaslt(op, args) or self.blas.lt_bytes == 0:
            self._cublas(thread)
            return
        if self.blas.lt_sets_up_cublas_handle:
            self._cublas(thread)
        self._cublaslt(thread)

    def _cublas(self, thread: str) -> None:
        if thread not in self._threads_with_cublas and self.blas.cublas_bytes > 0:
            self._threads_with_cublas.add(thread)
            self.recorder.emit(self.blas.cublas_bytes, "cublas_workspace", "workspace")

    def _cublaslt(self, thread: str) -> None:
        if self.blas.lt_per_call:
            sid = self.recorder.emit(self.blas.lt_bytes, "cublaslt_workspace", "workspace")
            self.recorder.emit_free(sid, self.blas.lt_bytes, "cublaslt_workspace")
        elif thread not in self._threads_with_lt:
            self._threads_with_lt.add(thread)
            self.recorder.emit(self.blas.lt_bytes, "cublaslt_workspace", "workspace")

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
    with (
        _cuda_dropout(),
        _checkpoint_autocast(),
        cuda_attention.cuda_sdpa(target.compute_capability, target.prefer_cudnn_attention),
    ):
        yield


# -- replay through the caching allocator -------------------------------------------------------
def simulate(trace: Trace, target: CudaTarget, capacity_bytes: int | None) -> tuple[int, int, dict[str, int]]:
    """Peak allocated, peak reserved and the breakdown at peak allocation, in allocator bytes."""
    # The CUDA context (and cuBLAS's own workspaces, when torch does not cache them, one per
    # forward and backward thread) take their share of the device before the allocator gets any.
    outside = target.context_bytes + 2 * target.blas_workspaces.outside_allocator_bytes
    capacity = UNLIMITED if capacity_bytes is None else max(0, capacity_bytes - outside)
    sim = CachingAllocatorSimulator(capacity=capacity, max_split_size=target.max_split_size)
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
    if target.blas_workspaces.outside_allocator_bytes:
        breakdown["cublas_own_workspaces"] = 2 * target.blas_workspaces.outside_allocator_bytes
    return sim.stats.peak_allocated, sim.stats.peak_reserved, breakdown


def _uses_cublaslt(op: str, args: tuple[Any, ...]) -> bool:
    # addmm's bias (a 1-d self) and activation epilogues run on cuBLASLt (Blas.cpp useLtInterface).
    if op == "aten._addmm_activation.default":
        return True
    return op == "aten.addmm.default" and isinstance(args[0], torch.Tensor) and args[0].dim() == 1


def _host_scalar(event: Any, trace: Trace) -> bool:
    # Scalars the foreach optimizers build with torch.tensor(..., device="cpu").
    return event.phase == "optimizer" and 0 < event.nbytes <= 8 and event.op.startswith("aten.lift")
