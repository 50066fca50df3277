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
from typing import Any

import torch
from torch._subclasses.fake_tensor import unset_fake_temporarily
from torch.utils._pytree import tree_flatten

_CALIBRATED = {
    "aten.mkldnn_rnn_layer.default": torch.ops.aten.mkldnn_rnn_layer.default,
    "aten.mkldnn_rnn_layer_backward.default": torch.ops.aten.mkldnn_rnn_layer_backward.default,
}


_CONV = "aten.convolution.default"
_CONV_BACKWARD = "aten.convolution_backward.default"


def needs_correction(op: str) -> bool:
    return op in _CALIBRATED or op in (_CONV, _CONV_BACKWARD)


def correct_output(op: str, args: tuple[Any, ...], out: Any) -> tuple[Any, int]:
    """The op's outputs with the true workspace, and the kernel's transient scratch bytes."""
    if op == _CONV:
        return out, _conv_forward_scratch(args, out)
    if op == _CONV_BACKWARD:
        return out, _conv_backward_scratch(args)
    workspace, scratch = _calibrate(op, _signature(args))
    if workspace and isinstance(out, tuple) and out[3].numel() == 0:
        out = (*out[:3], torch.empty(workspace, dtype=torch.uint8, device=out[3].device))
    return out, scratch


def _nbytes(t: Any) -> int:
    return t.numel() * t.element_size() if isinstance(t, torch.Tensor) else 0


def _channel_block() -> int:
    # oneDNN's blocked layouts (nChw16c / nChw8c) pad channels to the SIMD width.
    return 16 if "AVX512" in torch.backends.cpu.get_cpu_capability() else 8


def _blocked_nbytes(t: torch.Tensor) -> int:
    if t.dim() < 3:
        return _nbytes(t)
    block = _channel_block()
    padded = -(-t.shape[1] // block) * block
    return _nbytes(t) // max(1, t.shape[1]) * padded


def _conv_forward_scratch(args: tuple[Any, ...], out: torch.Tensor) -> int:
    # oneDNN convolution reorders input and weight into its blocked layouts, computes into a
    # channel-padded blocked output and copies that out; transposed convolutions keep one more
    # output-sized buffer. Measured on 1-d/2-d, strided, grouped, 1x1 and transposed ones.
    if args[0].dtype != torch.float32:
        return 0
    i, w, o = _nbytes(args[0]), _nbytes(args[1]), _nbytes(out)
    if args[6]:  # transposed
        return max(i + w, 2 * o)
    blocked = _blocked_nbytes(out)
    return max(i + w + blocked, blocked + o) - o


def _conv_backward_scratch(args: tuple[Any, ...]) -> int:
    # Measured oneDNN sequence: grad_input = reorder(grad_out, channel-padded) + reorder(weight) + blocked result,
    # then copied out (twice for 1-d convolutions, which run as unsqueezed 2-d ones); grad_weight
    # = reorder(grad_out) + reorder(input) + blocked result + a weight-sized scratch, while
    # grad_input is already alive. Exact on the measured shapes except 3-channel inputs, which
    # oneDNN does not reorder (over-estimated by the input's size: the safe side).
    grad_out, inp, weight, mask = args[0], args[1], args[2], args[-1]
    if inp.dtype != torch.float32:
        return 0
    g, i, w = _blocked_nbytes(grad_out), _nbytes(inp), _nbytes(weight)
    copies = 3 if inp.dim() == 3 else 2
    peak_input = max(g + w + i, copies * i) if mask[0] else 0
    kept = i if mask[0] else 0
    peak_weight = kept + g + i + 2 * w if mask[1] else 0
    outputs = kept + (w if mask[1] else 0)
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


@functools.lru_cache(maxsize=256)
def _calibrate(op: str, signature: tuple[Any, ...]) -> tuple[int, int]:
    """(workspace bytes returned, scratch bytes above the outputs at the kernel's peak)."""
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
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        out = call()
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    running = peak = 0
    for event in sorted(events, key=lambda e: e.start_ns()):
        running += event.nbytes()
        peak = max(peak, running)
    return out, peak
