"""Corrections for CPU kernels whose fake (meta) implementation under-reports memory.

oneDNN convolutions reorder their operands into blocked layouts: analytic scratch sizes below.
``aten.mkldnn_rnn_layer`` (the oneDNN LSTM used on CPU) keeps a workspace for backward that its
meta kernel returns empty, and it and its backward allocate scratch memory inside the kernel.
oneDNN's layouts (page-aligned parts, padded leading dimensions) are only known to oneDNN, so
each distinct shape is calibrated once by running that single kernel on zeros under the memory
profiler (cached per shape). These are the only real FLOPs the estimator runs.
"""

from __future__ import annotations

import functools
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
    if args[6]:
        return _deconv_forward_scratch(args, out)
    i, w, o = _nbytes(args[0]), _nbytes(args[1]), _nbytes(out)
    blocked = _blocked_nbytes(out)
    return max(i + w + blocked, blocked + o) - o


def _deconv_forward_scratch(args: tuple[Any, ...], out: torch.Tensor) -> int:
    """Transposed convolution (oneDNN runs it as a backward-data convolution), measured.

    Strided (upsampling) ones keep plain layouts: a per-thread scratchpad, the input, the weight
    with padded output channels and the output, then two more output-sized buffers while the
    result is copied out. Stride-1 ones block everything and keep a second padded output.
    """
    x, weight = args[0], args[1]
    block = _channel_block()
    cin, cout = x.shape[1], out.shape[1]
    i, o = _nbytes(x), _nbytes(out)
    per_tap = _nbytes(weight) // max(1, weight.shape[0] * weight.shape[1])  # bytes per (cin, cout/g) pair
    w_out_padded = per_tap * weight.shape[0] * _pad(weight.shape[1], block)
    if any(s > 1 for s in args[3]):
        peak = max(_spread_scratchpad(x) + i + w_out_padded + o, 3 * o)
    else:
        ib = i // cin * _pad(cin, block)
        ob = o // cout * _pad(cout, block)
        w_padded = per_tap * _pad(weight.shape[0], block) * _pad(weight.shape[1], block)
        peak = max(ob + 128 + ib + w_padded + ob, ob + o)
    return max(0, peak - o)


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
    if args[7]:
        return _deconv_backward_scratch(args)
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


def _deconv_backward_scratch(args: tuple[Any, ...]) -> int:
    """Transposed convolution backward, measured on 1-d/2-d, strides 1-2, kernels 2-4, 3-256 channels.

    grad_input is a forward convolution of grad_out: grad_out is reordered (channel-padded) only
    when it has at least a SIMD block of channels, the weight is padded, the blocked result is
    copied out. grad_weight reorders grad_out (not at all with <= 3 channels, padded to half a
    block below a block) and the input, computes into a padded weight, plus one weight-sized
    reduction buffer per extra thread.
    """
    grad_out, x, weight, mask = args[0], args[1], args[2], args[-1]
    block = _channel_block()
    cin, cout = x.shape[1], grad_out.shape[1]
    i, gsz, w = _nbytes(x), _nbytes(grad_out), _nbytes(weight)
    per_tap = w // max(1, weight.shape[0] * weight.shape[1])
    per_out_channel = weight.shape[1] / max(1, cout)  # 1 / groups
    pin = _pad(cin, block)
    ib = i // cin * pin
    kept = i if mask[0] else 0
    peak_input = 0
    if mask[0]:
        c1 = _pad(cout, block) if cout >= block else cout
        g1 = gsz // cout * c1 if cout >= block else 0
        peak_input = max(g1 + int(per_tap * pin * c1 * per_out_channel) + ib, ib + i)
    peak_weight = 0
    bias = 4 * cout if len(mask) > 2 and mask[2] else 0
    if mask[1]:
        # Below a SIMD block of output channels it blocks by half a block, input channels too.
        block2 = block if cout >= block else block // 2
        c2 = 0 if cout <= 3 else _pad(cout, block2)
        pin2 = _pad(cin, block2)
        w2 = int(per_tap * pin2 * (c2 or cout) * per_out_channel)
        reduction = (_threads() - 1) * (w2 + _REDUCTION_EXTRA)
        x2 = i // cin * pin2
        peak_weight = kept + max(gsz // cout * c2 + x2 + w2 + reduction + bias, w2 + 2 * bias + w)
    outputs = kept + (w if mask[1] else 0) + bias
    return max(0, max(peak_input, peak_weight) - outputs)


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
