"""Corrections for CPU kernels whose fake (meta) implementation under-reports memory.

oneDNN convolutions reorder their operands into blocked layouts: analytic scratch sizes below;
transposed ones (oneDNN's backward-data kernels, or ATen's im2col path) are measured per shape.
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
    if op == _CONV and args[6]:
        return out, _transposed_scratch(op, args, args[:9], out)
    if op == _CONV_BACKWARD and args[7]:
        return out, _transposed_scratch(op, args, (args[1], args[2], None, *args[4:10]), out)
    if op == _CONV:
        return out, _conv_forward_scratch(args, out) if _uses_onednn(args[:9]) else 0
    if op == _CONV_BACKWARD:
        conv_args = (args[1], args[2], None, *args[4:10])
        return out, _conv_backward_scratch(args) if _uses_onednn(conv_args) else 0
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
        return True  # the rules over-estimate rather than miss
    return int(cast(Any, backend)) in _ONEDNN


def _nbytes(t: Any) -> int:
    return t.numel() * t.element_size() if isinstance(t, torch.Tensor) else 0


def _channel_block() -> int:
    # oneDNN's blocked layouts (nChw16c / nChw8c) pad channels to the SIMD width.
    return 16 if "AVX512" in torch.backends.cpu.get_cpu_capability() else 8


def _pad(channels: int, block: int) -> int:
    return -(-channels // block) * block


def _blocked_nbytes(t: torch.Tensor) -> int:
    if t.dim() < 3:
        return _nbytes(t)
    return _nbytes(t) // max(1, t.shape[1]) * _pad(t.shape[1], _channel_block())


def _threads() -> int:
    # oneDNN sizes its per-thread scratch (weight-gradient reduction buffers, deconvolution
    # scratchpads) by the OpenMP team, i.e. torch.get_num_threads() of the calling thread.
    return max(1, torch.get_num_threads())


# Per-extra-thread weight-gradient reduction buffer beyond a weight-sized copy: measured 8,512-12,416 (with the bias gradient)
# bytes for every convolution shape tried at 2 threads (1-d and 2-d, plain and transposed).
_REDUCTION_EXTRA = 12544


def _spread_scratchpad(src: torch.Tensor) -> int:
    """Per-thread scratchpad of a strided backward-data pass (which a transposed forward is).

    Batch-independent, and measured at 1 thread as 37 KB + 16 KiB steps that follow one image of the
    source (the deconvolution's input, the convolution's grad_out): 37-332 KB for 3-256 channels,
    kernels 2-4, 8x8 to 32x32 and 1-d 256; 1.7-1.9x that at 2 threads. Bounded here by one and a half
    images of the source plus 40 KiB, per thread.
    """
    per_image = _nbytes(src) // max(1, src.shape[0])
    return _threads() * (per_image * 3 // 2 + 40 * 1024)


def _conv_forward_scratch(args: tuple[Any, ...], out: torch.Tensor) -> int:
    # oneDNN convolution reorders input and weight into its blocked layouts, computes into a
    # channel-padded blocked output and copies that out. Measured on 1-d/2-d, strided, grouped,
    # dilated and 1x1 ones.
    if args[0].dtype != torch.float32:
        return 0
    i, w, o = _nbytes(args[0]), _nbytes(args[1]), _nbytes(out)
    blocked = _blocked_nbytes(out)
    return max(i + w + blocked, blocked + o) - o


# Transposed convolutions are measured, not modelled. ATen (Convolution.cpp's backend selection) runs
# a float32 one on CPU through oneDNN (MkldnnTranspose) unless the batch is 1 with a kernel of at most
# 3x3 on a small image, or the output padding is big: then slow_conv_transpose2d/3d (SlowTranspose2d),
# whose im2col columns are N x OC*KH*KW x IH*IW for the forward and for grad_input and one image's for
# grad_weight. oneDNN runs it as a backward-data convolution and picks among jit and gemm kernels
# whose blocked reorders and per-thread scratchpads depend on the ISA, the blocking it chooses for the
# shape and the OpenMP team, which only oneDNN knows: a rule fitted to some shapes missed others by
# up to several output sizes. So each shape is run once on zeros under the profiler (cached per shape
# and thread count), at most at a batch costing _CALIBRATION_FLOPS.
_CALIBRATION_FLOPS = 4e8
# Batch selection in ATen depends on the batch only up to 16 (the single-threaded 1x1 rule).
_MIN_CALIBRATION_BATCH = 16


def _transposed_scratch(op: str, args: tuple[Any, ...], conv_args: tuple[Any, ...], out: Any) -> int:
    """Scratch bytes above the outputs of a transposed convolution (forward or backward), measured.

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


def _conv_backward_scratch(args: tuple[Any, ...]) -> int:
    # Measured oneDNN sequence: grad_input = reorder(grad_out, channel-padded) + reorder(weight) + blocked result,
    # then copied out (twice for 1-d convolutions, which run as unsqueezed 2-d ones); grad_weight
    # = reorder(grad_out) + reorder(input) + blocked result, plus a weight-sized reduction buffer per
    # extra thread, while grad_input is already alive. Exact on the measured shapes except 3-channel
    # inputs, which oneDNN does not reorder, and grouped convolutions with few channels per group,
    # which it runs through im2col (over-estimated: the safe side).
    grad_out, inp, weight, mask = args[0], args[1], args[2], args[-1]
    if inp.dtype != torch.float32:
        return 0
    g, i, w = _blocked_nbytes(grad_out), _nbytes(inp), _nbytes(weight)
    groups = int(args[9])
    # Strided ones also take a per-thread scratchpad and copy the result out twice, like 1-d ones
    # (not grouped ones, which have their own kernels).
    strided = groups == 1 and any(s > 1 for s in args[4])
    copies = 3 if inp.dim() == 3 or strided else 2
    scratchpad = _spread_scratchpad(grad_out) if strided else 0
    peak_input = max(g + w + i + scratchpad, copies * i) if mask[0] else 0
    kept = i if mask[0] else 0
    reduction = (_threads() - 1) * (w + _REDUCTION_EXTRA)
    # oneDNN reads an input of at most 3 channels in its plain layout (no reorder).
    i_reordered = i if inp.shape[1] > 3 else 0
    peak_weight = kept + max(g + i_reordered + w + reduction, 2 * w) if mask[1] else 0
    if mask[1] and _im2col_weight_gradient(inp, weight, groups):
        # Grouped convolutions whose groups are not multiples of 8 channels compute the weight
        # gradient by im2col (one column buffer, not per thread: measured the same at 1 and 2).
        columns = weight.shape[1] * weight[0, 0].numel() * grad_out[0, 0].numel() * inp.element_size()
        peak_weight = kept + w + columns + 40 * 1024
    outputs = kept + (w if mask[1] else 0)
    outputs = kept + (w if mask[1] else 0)
    return max(0, max(peak_input, peak_weight) - outputs)


def _im2col_weight_gradient(inp: torch.Tensor, weight: torch.Tensor, groups: int) -> bool:
    if groups == 1 or groups == inp.shape[1]:
        return False  # plain and depthwise convolutions have blocked kernels
    return (inp.shape[1] // groups) % 8 != 0 or (weight.shape[0] // groups) % 8 != 0


def _signature(args: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(_describe(a) for a in args)


def _describe(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        # Strides matter: a non-contiguous input makes the kernel take a contiguous copy.
        return ("T", tuple(value.shape), value.dtype, tuple(value.stride()))
    return tuple(value) if isinstance(value, list) else value


def _materialize(item: Any) -> Any:
    if isinstance(item, tuple) and item[:1] == ("T",):
        return torch.zeros_like(torch.empty_strided(item[1], item[3], dtype=item[2]))
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
