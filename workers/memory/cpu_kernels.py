"""Corrections for CPU kernels whose fake (meta) implementation under-reports memory.

oneDNN convolutions reorder their operands into blocked layouts and take kernel scratch that depends
on the ISA; they, and ATen's im2col transposed convolutions, are measured per shape.
``aten.mkldnn_rnn_layer`` (the oneDNN LSTM used on CPU) keeps a workspace for backward that its
meta kernel returns empty, and it and its backward allocate scratch memory inside the kernel.
oneDNN's layouts (page-aligned parts, padded leading dimensions) are only known to oneDNN, so
each distinct shape is calibrated once by running that single kernel on zeros under the memory
profiler (cached per shape). These are the only real FLOPs the estimator runs.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any, cast

import torch
from torch._subclasses.fake_tensor import unset_fake_temporarily
from torch.profiler import ProfilerActivity, profile
from torch.utils._pytree import tree_flatten

_CALIBRATED = {
    "aten.mkldnn_rnn_layer.default": torch.ops.aten.mkldnn_rnn_layer.default,
    "aten.mkldnn_rnn_layer_backward.default": torch.ops.aten.mkldnn_rnn_layer_backward.default,
    # bf16/fp16 matrix products run through oneDNN's brgemm kernels, which pack operand panels per
    # thread (measured 13 KB-3.4 MB for 64-3072 wide operands, doubling from 1 to 2 threads, and
    # different per ISA); fp32 ones go to MKL and allocate nothing beyond their outputs.
    "aten.mm.default": torch.ops.aten.mm.default,
    "aten.addmm.default": torch.ops.aten.addmm.default,
    "aten.bmm.default": torch.ops.aten.bmm.default,
    "aten.baddbmm.default": torch.ops.aten.baddbmm.default,
}
_LOW_PRECISION = (torch.bfloat16, torch.float16)
_MATMULS = {"aten.mm.default", "aten.addmm.default", "aten.bmm.default", "aten.baddbmm.default"}


_CONV = "aten.convolution.default"
_CONV_BACKWARD = "aten.convolution_backward.default"
# Ops whose measured scratch grows with the batch: above its calibration batch it is scaled by
# the rows (``_measured_scratch``), so the planner's one-trace guess takes it as per-row.
BATCH_SCALED_SCRATCH_OPS = frozenset({_CONV, _CONV_BACKWARD})


_MSE = "aten.mse_loss.default"


def needs_correction(op: str) -> bool:
    return op in _CALIBRATED or op in (_CONV, _CONV_BACKWARD, _MSE)


def held_buffer(op: str, args: tuple[Any, ...]) -> int:
    """Bytes a CPU kernel keeps alive as long as its output, invisible to fake tensors.

    Reduced ``mse_loss`` on CPU keeps an input-sized buffer (the squared difference) until the loss
    tensor is freed; measured with torch.profiler for mean and sum reductions.
    """
    if op == _MSE and (len(args) < 3 or args[2] != 0) and isinstance(args[0], torch.Tensor):
        return _nbytes(args[0])
    return 0


def correct_output(op: str, args: tuple[Any, ...], out: Any) -> tuple[Any, int]:
    """The op's outputs with the true workspace, and the kernel's transient scratch bytes."""
    if op in (_CONV, _CONV_BACKWARD):
        conv_args = args[:9] if op == _CONV else (args[1], args[2], None, *args[4:10])
        # Transposed ones are measured whatever the backend (ATen's im2col path has columns too).
        measured = bool(conv_args[6]) or _uses_onednn(conv_args)
        return out, _measured_scratch(op, args, conv_args, out) if measured else 0
    if op == _MSE:
        # A second input-sized temporary exists while the kept buffer is filled.
        return out, _nbytes(args[0]) if (len(args) < 3 or args[2] != 0) else 0
    if op in _MATMULS:
        if not (isinstance(out, torch.Tensor) and out.dtype in _LOW_PRECISION):
            return out, 0
        return out, _calibrate(op, _signature(args), _threads())[1]
    workspace, scratch = _calibrate(op, _signature(args), _threads())
    if workspace and isinstance(out, tuple) and out[3].numel() == 0:
        out = (*out[:3], torch.empty(workspace, dtype=torch.uint8, device=out[3].device))
    return out, scratch


def _onednn_backends() -> frozenset[int]:
    mkldnn = int(torch._C._ConvBackend.Mkldnn)  # type: ignore[attr-defined]
    # ConvUtils.h declares MkldnnTranspose right after Mkldnn; torch 2.13's Python enum has no name
    # for it (its binding list has a typo), so it is taken by value.
    return frozenset({mkldnn, mkldnn + 1})


_ONEDNN = _onednn_backends()


def _uses_onednn(conv_args: tuple[Any, ...]) -> bool:
    """Whether ATen runs this convolution through oneDNN, asked of ATen's own backend selection.

    It depends on the shapes and on torch.get_num_threads(): single-threaded, a 1x1 convolution
    on fewer than 16 rows runs as a plain matrix product (``Slow2d``), which allocates nothing
    beyond its outputs (measured).
    """
    try:
        backend = torch._C._select_conv_backend(*conv_args)
    except (RuntimeError, TypeError):
        return True  # measured rather than assumed to allocate nothing
    return int(cast(Any, backend)) in _ONEDNN


def _nbytes(t: Any) -> int:
    return t.numel() * t.element_size() if isinstance(t, torch.Tensor) else 0


def _threads() -> int:
    # oneDNN sizes its per-thread scratch (weight-gradient reduction buffers, deconvolution
    # scratchpads) by the OpenMP team, i.e. torch.get_num_threads() of the calling thread.
    return max(1, torch.get_num_threads())


# oneDNN convolutions (plain, strided, grouped, dilated, transposed) are measured, not modelled. oneDNN
# picks among jit, brgemm and gemm kernels by the ISA (AVX2, AVX-512, AMX), the shape's blocking and
# the OpenMP team; their blocked reorders, im2col columns and per-thread scratchpads and reduction
# buffers follow that choice, which only oneDNN knows: rules fitted on AVX-512 cores over-estimated a
# grouped and a dilated convolution by 11-12% on an AVX2 core, and a transposed-convolution rule
# fitted to some shapes missed others by several output sizes. ATen (Convolution.cpp's backend
# selection) runs a float32 transposed one through oneDNN (MkldnnTranspose) unless the batch is 1
# with a kernel of at most 3x3 on a small image, or the output padding is big: then
# slow_conv_transpose2d/3d, whose im2col columns are N x OC*KH*KW x IH*IW. So each shape is run once
# on zeros under the profiler (cached per shape and thread count), at most at a batch costing
# _CALIBRATION_FLOPS.
_CALIBRATION_FLOPS = 4e8
# Batch selection in ATen depends on the batch only up to 16 (the single-threaded 1x1 rule).
_MIN_CALIBRATION_BATCH = 16


def _measured_scratch(op: str, args: tuple[Any, ...], conv_args: tuple[Any, ...], out: Any) -> int:
    """Scratch bytes above the outputs of a oneDNN or transposed convolution (forward or backward), measured.

    Above the calibration batch n the measured peak is scaled by N/n: every buffer is a fixed size
    or proportional to the batch (reorders, columns, the blocked result), so peak(N) <= peak(n)*N/n.
    """
    batch = int(conv_args[0].shape[0])
    n = _calibration_batch(conv_args)
    n = batch if batch <= n else n
    batched = (0,) if op == _CONV else (0, 1)
    signature = tuple(_resized(_describe(a), n) if i in batched else _describe(a) for i, a in enumerate(args))
    peak = _kernel_peak(op, signature, _threads())
    outputs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
    return max(0, math.ceil(peak * batch / n) - sum(_nbytes(t) for t in outputs))


def _calibration_batch(conv_args: tuple[Any, ...]) -> int:
    x, weight = conv_args[0], conv_args[1]
    per_image = 2 * x[0].numel() * weight[0].numel() * 3  # forward + grad_input + grad_weight
    return max(_MIN_CALIBRATION_BATCH, int(_CALIBRATION_FLOPS // max(1, per_image)))


def _resized(description: Any, batch: int) -> Any:
    kind, shape, dtype, stride = description
    return (kind, (batch, *shape[1:]), dtype, stride)


@functools.lru_cache(maxsize=1024)
def _kernel_peak(op: str, signature: tuple[Any, ...], threads: int) -> int:
    """Peak bytes the real kernel allocates on zeros of these shapes, its outputs included."""
    with unset_fake_temporarily():
        real = [_materialize(item) for item in signature]
        kernel = (
            torch.ops.aten.convolution.default if op == _CONV else torch.ops.aten.convolution_backward.default
        )
        return _profiled(lambda: kernel(*real))[1]


def _signature(args: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(_describe(a) for a in args)


def _describe(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        # Strides matter: a non-contiguous input makes the kernel take a contiguous copy.
        return ("T", tuple(value.shape), value.dtype, tuple(value.stride()))
    return tuple(value) if isinstance(value, list) else value


def _materialize(item: Any) -> Any:
    if isinstance(item, tuple) and item[:1] == ("T",):
        # Not zero-filled: what a kernel allocates does not depend on the values it reads, and
        # filling each operand (page faults and memset of 5-10 MB, 24 operands) was a third of a
        # cold convolutional plan.
        return torch.empty_strided(item[1], item[3], dtype=item[2])
    return list(item) if isinstance(item, tuple) else item


@functools.lru_cache(maxsize=1024)
def _calibrate(op: str, signature: tuple[Any, ...], threads: int) -> tuple[int, int]:
    """(workspace bytes returned, scratch bytes above the outputs at the kernel's peak).

    Keyed by the thread count too: oneDNN sizes per-thread buffers by the OpenMP team.
    """
    # Not under no_grad: the forward kernel only builds the training workspace in grad mode.
    with unset_fake_temporarily():
        real = [_materialize(item) for item in signature]
        out, peak = _profiled(lambda: _CALIBRATED[op](*real))
        outputs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        out_bytes = sum(t.untyped_storage().nbytes() for t in outputs)
        workspace = 0
        if op == "aten.mkldnn_rnn_layer.default" and out[3] is not None:
            workspace = int(out[3].untyped_storage().nbytes())
        return workspace, max(0, peak - out_bytes)


def _profiled(call: Callable[[], Any]) -> tuple[Any, int]:
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        out = call()
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    running = peak = 0
    for event in sorted(events, key=lambda e: e.start_ns()):
        running += event.nbytes()
        peak = max(peak, running)
    return out, peak
