"""Fast estimates for recurrent layers: a per-time-step linear memory profile instead of a full trace.

On the CPU, ``nn.GRU`` and ``nn.RNN`` run as a loop of small ops per time step (tens of thousands of
fake ops for a 64-step two-layer bidirectional GRU, several seconds of dispatch), and ``nn.LSTM``
runs oneDNN's kernel, calibrated on real zeros per shape. Their memory, though, grows by the same
amount per time step. So each recurrent module call is profiled once, standalone, at 4, 5 and 6
steps (a few hundred ops); when the three profiles are exactly linear in the step count they are
extrapolated to the real length, otherwise the module is profiled at the real length (exact, slow).
In the traced training run the module is replaced by a stand-in autograd function that allocates
the real outputs and gradients and inserts the profiled saved and transient bytes as synthetic
allocations, at the same points. Profiles are cached per (module config, input shape, thread
count); the full per-step trace stays available as the test oracle (``fast_recurrent=False``).
"""

from __future__ import annotations

import contextlib
import difflib
import functools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, cast

import torch
from torch import nn
from torch.utils._python_dispatch import _disable_current_modes

from workers.memory.trace import AllocationRecorder, Trace

_SHORT_STEPS = (4, 5, 6)


@dataclass(frozen=True)
class RecurrentProfile:
    """Bytes of one recurrent module call, relative to the live bytes just before it."""

    forward_peak: int  # highest level during the forward call
    forward_keep: int  # left after it: outputs + what autograd saved for backward
    output_bytes: int
    backward_peak: int  # highest level during its backward, over the level at its start
    backward_end: int  # level at its end, over the level at its start

    @property
    def saved_bytes(self) -> int:
        return max(0, self.forward_keep - self.output_bytes)


@dataclass(frozen=True)
class _Key:
    kind: str
    config: tuple[Any, ...]
    input_shape: tuple[int, ...]
    hx_shapes: tuple[tuple[int, ...], ...]
    dtype: torch.dtype
    input_requires_grad: bool
    training: bool
    cpu_corrections: bool
    threads: int


def install(model: nn.Module, fake_mode: Any, recorder: AllocationRecorder) -> int:
    """Replace every plain recurrent layer's forward with the profiled stand-in. Returns the count."""
    count = 0
    for module in model.modules():
        if type(module) in (nn.GRU, nn.RNN, nn.LSTM):
            stand_in = functools.partial(_stand_in_forward, cast(nn.RNNBase, module), fake_mode, recorder)
            module.forward = stand_in  # type: ignore[method-assign]
            count += 1
    return count


def _supported(module: nn.RNNBase, x: Any, hx: Any) -> bool:
    if not isinstance(x, torch.Tensor) or x.dim() != 3 or getattr(module, "proj_size", False):
        return False
    if torch.is_autocast_enabled(x.device.type):
        return False
    states = hx if isinstance(hx, tuple) else (hx,)
    return all(h is None or isinstance(h, torch.Tensor) for h in states)


def _stand_in_forward(
    module: nn.RNNBase, fake_mode: Any, recorder: AllocationRecorder, x: Any, hx: Any = None
) -> Any:
    if not _supported(module, x, hx):
        return type(module).forward(module, x, hx)
    states = tuple(h for h in (hx if isinstance(hx, tuple) else (hx,)) if h is not None)
    key = _Key(
        kind=type(module).__name__,
        config=_config(module),
        input_shape=tuple(x.shape),
        hx_shapes=tuple(tuple(h.shape) for h in states),
        dtype=x.dtype,
        input_requires_grad=x.requires_grad,
        training=module.training,
        cpu_corrections=recorder.cpu_kernel_corrections,
        threads=torch.get_num_threads(),
    )
    profile = _profile(key, module, fake_mode)
    weights = [w for w in module._flat_weights if isinstance(w, torch.Tensor)]
    outputs = _StandIn.apply(profile, recorder, module, x, len(states), *states, *weights)
    output, *final = outputs
    if isinstance(module, nn.LSTM):
        return output, (final[0], final[1])
    return output, final[0]


def _config(module: nn.RNNBase) -> tuple[Any, ...]:
    return (
        module.mode,
        module.input_size,
        module.hidden_size,
        module.num_layers,
        module.bias,
        module.batch_first,
        module.dropout,
        module.bidirectional,
        tuple(w.requires_grad for w in module._flat_weights if isinstance(w, torch.Tensor)),
    )


def _output_shapes(module: nn.RNNBase, x: torch.Tensor) -> list[tuple[int, ...]]:
    directions = 2 if module.bidirectional else 1
    batch = x.shape[0] if module.batch_first else x.shape[1]
    state = (module.num_layers * directions, batch, module.hidden_size)
    shapes = [(*x.shape[:2], directions * module.hidden_size), state]
    if isinstance(module, nn.LSTM):
        shapes.append(state)
    return shapes


class _StandIn(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any,
        profile: RecurrentProfile,
        recorder: AllocationRecorder,
        module: nn.RNNBase,
        x: torch.Tensor,
        n_states: int,
        *rest: torch.Tensor,
    ) -> tuple[torch.Tensor, ...]:  # type: ignore[override]
        ctx.set_materialize_grads(False)
        ctx.profile, ctx.recorder = profile, recorder
        ctx.input_meta = [(t.shape, t.dtype, t.device) for t in (x, *rest)]
        outputs = tuple(
            torch.empty(shape, dtype=x.dtype, device=x.device) for shape in _output_shapes(module, x)
        )
        ctx.saved_sid = (
            recorder.emit(profile.saved_bytes, "recurrent_saved", "activations")
            if profile.saved_bytes
            else None
        )
        _transient(recorder, profile.forward_peak - profile.forward_keep)
        return outputs

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> tuple[Any, ...]:  # type: ignore[override]
        # The real backward frees the saved tensors step by step while it allocates gradients;
        # its highest level over the start is the profiled peak. Reach it first, then free the
        # saved block, then allocate the gradients: the same peak and the same end level.
        profile: RecurrentProfile = ctx.profile
        _transient(ctx.recorder, profile.backward_peak)
        if ctx.saved_sid is not None:
            ctx.recorder.emit_free(ctx.saved_sid, profile.saved_bytes, "recurrent_saved")
            ctx.saved_sid = None
        needs = ctx.needs_input_grad[3:]
        results = [
            torch.empty(shape, dtype=dtype, device=device) if need else None
            for (shape, dtype, device), need in zip(ctx.input_meta, needs[:1] + needs[2:], strict=True)
        ]
        return (None, None, None, results[0], None, *results[1:])


def _transient(recorder: AllocationRecorder, nbytes: int) -> None:
    if nbytes > 0:
        sid = recorder.emit(nbytes, "recurrent_scratch", "temporaries")
        recorder.emit_free(sid, nbytes, "recurrent_scratch")


# -- profiling ---------------------------------------------------------------------------------
_CACHE: dict[_Key, RecurrentProfile] = {}


def _profile(key: _Key, module: nn.RNNBase, fake_mode: Any) -> RecurrentProfile:
    if key not in _CACHE:
        _CACHE[key] = _extrapolated(key, module, fake_mode)
    return _CACHE[key]


Events = list[tuple[str, int]]  # (op, bytes: > 0 allocated, < 0 freed)


def _extrapolated(key: _Key, module: nn.RNNBase, fake_mode: Any) -> RecurrentProfile:
    """Profile at the real length, rebuilt from the event sequences at 4, 5 and 6 steps.

    One more step inserts one more block of ops per layer and direction. Aligning the 4- and 5-step
    sequences by op finds those blocks; other events may change size linearly with the length (the whole-sequence
    projection, the stacked output). The real-length sequence is rebuilt from them and must
    reproduce the 6-step one exactly; peaks are then read off it (not extrapolated: where the peak
    falls can move with the length). Anything irregular is profiled at the real length.
    """
    time_dim = 1 if module.batch_first else 0
    steps = key.input_shape[time_dim]
    if steps <= _SHORT_STEPS[-1]:
        return _profile_of(*_measure(key, module, fake_mode, steps))
    runs = [_measure(key, module, fake_mode, s) for s in _SHORT_STEPS]
    rebuilt: list[list[int]] = []
    for phase in ("forward", "backward"):
        a, b, c = (run[0] if phase == "forward" else run[1] for run in runs)
        check = _rebuild(a, b, 2)
        if check is None or check != [n for _, n in c]:
            return _profile_of(*_measure(key, module, fake_mode, steps))
        rebuilt.append(_rebuild(a, b, steps - _SHORT_STEPS[0]) or [])
    output_bytes = runs[0][2] + (runs[1][2] - runs[0][2]) * (steps - _SHORT_STEPS[0])
    return _profile_of(rebuilt[0], rebuilt[1], output_bytes)


def _rebuild(a: Events, b: Events, extra_steps: int) -> list[int] | None:
    """Bytes of the sequence ``extra_steps`` steps longer than ``a``, given ``b`` one step longer.

    ``b`` must be ``a`` with blocks of events inserted (one per layer and direction) and some events
    resized (those sized by the length): resized ones change linearly, inserted blocks repeat.
    """
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    out: list[int] = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            out += [n for _, n in a[i1:i2]]
        elif tag == "insert":
            out += [n for _, n in b[j1:j2]] * extra_steps
        else:
            part = _resized(a[i1:i2], b[j1:j2], extra_steps)
            if part is None:
                return None
            out += part
    return out


def _resized(a: Events, b: Events, extra_steps: int) -> list[int] | None:
    """A differing stretch: the same ops resized linearly, with at most one block inserted."""
    width = len(b) - len(a)
    if width < 0:
        return None
    ops_a, ops_b = [op for op, _ in a], [op for op, _ in b]
    for cut in range(len(a) + 1):
        if ops_a[:cut] == ops_b[:cut] and ops_a[cut:] == ops_b[cut + width :]:
            kept = b[:cut] + b[cut + width :]
            grown = [x + extra_steps * (y - x) for (_, x), (_, y) in zip(a, kept, strict=True)]
            return grown[:cut] + [n for _, n in b[cut : cut + width]] * extra_steps + grown[cut:]
    return None


def _profile_of(
    forward: Events | list[int], backward: Events | list[int], output_bytes: int
) -> RecurrentProfile:
    forward_peak, forward_keep = _peak_and_end(forward)
    backward_peak, backward_end = _peak_and_end(backward)
    return RecurrentProfile(forward_peak, forward_keep, output_bytes, backward_peak, backward_end)


def _measure(key: _Key, module: nn.RNNBase, fake_mode: Any, steps: int) -> tuple[Events, Events, int]:
    """Byte sequences of one standalone forward and backward of ``module`` at ``steps`` time steps,
    and the bytes of its outputs."""
    time_dim = 1 if module.batch_first else 0
    shape = list(key.input_shape)
    shape[time_dim] = steps
    trace = Trace()
    recorder = AllocationRecorder(trace)
    recorder.cpu_kernel_corrections = key.cpu_corrections
    with _standalone(fake_mode):
        x = torch.zeros(shape, dtype=key.dtype, requires_grad=key.input_requires_grad)
        states = [torch.zeros(s, dtype=key.dtype) for s in key.hx_shapes]
        hx: Any = None
        if states:
            hx = tuple(states) if isinstance(module, nn.LSTM) else states[0]
        weights = [w for w in module._flat_weights if isinstance(w, torch.Tensor) and w.requires_grad]
        inputs = [t for t in (x, *states) if t.requires_grad] + weights
        for tensor in (*module._flat_weights, x, *states):
            if isinstance(tensor, torch.Tensor):
                recorder.register(tensor, "other")  # alive before the call: not part of its profile
        with recorder:
            before = len(trace.events)
            output, final = type(module).forward(module, x, hx)
            forward_events = trace.events[before:]
            outputs = [output, *(final if isinstance(final, tuple) else (final,))]
            output_bytes = sum(t.untyped_storage().nbytes() for t in outputs)
        # Downstream gradients arrive contiguous (a batch_first output is a transposed view). The
        # step-by-step GRU/RNN backward lets the engine free it once consumed. In a model, oneDNN's
        # LSTM backward keeps it and one more buffer of its size to the end (measured against the
        # full trace), which counting it as allocated inside the backward reproduces.
        grad_outputs = [torch.zeros(output.shape, dtype=output.dtype)]
        held = None
        if isinstance(module, nn.LSTM):
            held = grad_outputs[0]
        else:
            recorder.register(grad_outputs[0], "other")
        with recorder:
            before = len(trace.events)
            grads = torch.autograd.grad([output], inputs, grad_outputs.pop(), allow_unused=True)
            del held
            backward_events = trace.events[before:]
            del grads
        del output, final, outputs
    return (
        [(e.op, e.nbytes) for e in forward_events],
        [(e.op, e.nbytes) for e in backward_events],
        output_bytes,
    )


def _peak_and_end(events: Events | list[int]) -> tuple[int, int]:
    level = peak = 0
    for event in events:
        n = event if isinstance(event, int) else event[1]
        level += n
        peak = max(peak, level)
    return peak, level


@contextlib.contextmanager
def _standalone(fake_mode: Any) -> Iterator[None]:
    """Leave the traced run's dispatch modes (its recorder must not see the profiling ops)."""
    with _disable_current_modes(), fake_mode, torch.enable_grad():
        yield
