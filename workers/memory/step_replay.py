"""The optimizer step of one trace, replayed in another trace of the same model at another batch.

A built-in optimizer's step (SGD, Adam, AdamW) allocates and frees the same storages, in the same
order, whatever the batch: it reads the parameters and their gradients, and a dense gradient has
its parameter's shape. So once the planner has traced a model at one batch, the optimizer-phase
events of the next trace (a quarter to two fifths of a trace's fake-tensor dispatch) are known
before it runs: ``StepReplayer`` emits them instead of stepping, with storage ids numbered as the
real step would number them (the replayed trace equals a full one event for event).

The replay is refused, and the trace runs the real step, unless what the recorded step saw holds
again: the same trainable parameters with dense gradients of the same shapes and dtypes, at the
same iteration. A recorded step that freed a storage allocated outside an optimizer phase, or whose
allocation was freed outside one, is not kept (its events depend on the rest of the program).

When the recorded run's second iteration repeated its first outside the optimizer step (the same
allocations and frees, in the same order, nothing carried from one to the other: ``repeats``), a
replaying trace also writes its second iteration from its own first (forward, backward, zero_grad)
and the recorded second step, and stops there: the program runs one iteration on fake tensors, not
two. A first iteration that leaves anything allocated but a device workspace (set up once) or frees
what it did not allocate is not repeated (``ReplayMismatch``: the trace runs in full).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any

import torch

from workers.memory.trace import AllocationRecorder, Event, Trace

Signature = tuple[Any, ...]  # per trainable parameter: None, or its gradient's (shape, dtype)


class ReplayMismatch(Exception):
    """The step to replay is not the step that was recorded: trace this run in full."""


@dataclass(frozen=True)
class StepReplay:
    grads: tuple[Signature, ...]  # per iteration, what the step saw
    events: tuple[tuple[Event, ...], ...]  # per iteration, the optimizer phase's events
    category: dict[int, str]
    host: frozenset[int]
    repeats: bool = False  # two iterations, the second the first again outside the step


def _iterations(trace: Trace) -> list[list[Event]]:
    """The training run's events, iteration by iteration. By position, not by label: a free between
    two phases (the graph's saved tensors, dropped with the loss after backward) is labelled with
    the recorder's resting phase ("setup", iteration 0) whichever iteration it happens in."""
    out: list[list[Event]] = []
    for event in trace.events:
        if event.phase != "setup" and event.iteration == len(out):
            out.append([])
        if out:
            out[-1].append(event)
    return out


def _training_events(events: list[Event]) -> list[Event]:
    """An iteration's events but its optimizer step's."""
    return [e for e in events if e.phase != "optimizer"]


def _one_time(events: Iterable[Event]) -> set[int]:
    """Storages the events allocate and leave allocated."""
    events = list(events)
    freed = {e.sid for e in events if e.nbytes < 0}
    return {e.sid for e in events if e.nbytes > 0 and e.sid not in freed}


def _pattern(trace: Trace, events: list[Event]) -> list[tuple[Any, ...]] | None:
    """The events with storage ids replaced by the position of their allocation in the list, device
    workspaces set up once left out; None when a free's allocation is not in the list or anything
    else is left allocated."""
    kept = _one_time(events)
    if any(trace.category.get(sid) != "workspace" for sid in kept):
        return None
    position: dict[int, int] = {}
    out: list[tuple[Any, ...]] = []
    for event in events:
        if event.sid in kept:
            continue
        if event.nbytes > 0:
            position[event.sid] = len(out)
            out.append((event.nbytes, event.op, event.phase, trace.category.get(event.sid)))
        elif event.sid in position:
            out.append((event.nbytes, event.op, event.phase, position[event.sid]))
        else:
            return None
    return out


def _signature(params: Sequence[torch.Tensor]) -> Signature | None:
    """None when a gradient is not dense (a sparse embedding's grows with the rows of the batch)."""
    out: list[Any] = []
    for param in params:
        grad = param.grad
        if grad is not None and grad.layout != torch.strided:
            return None
        out.append(None if grad is None else (tuple(grad.shape), grad.dtype, grad.device.type))
    return tuple(out)


class _Stepping:
    """Stands in for the optimizer in ``run_training``: ``step`` is this class's, ``zero_grad`` and
    ``state`` (read by ``classify_after_step``) the wrapped optimizer's."""

    def __init__(self, optimizer: torch.optim.Optimizer, params: Sequence[torch.Tensor]) -> None:
        self.optimizer = optimizer
        self.params = params

    @property
    def state(self) -> Any:
        return self.optimizer.state

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.optimizer.zero_grad(set_to_none=set_to_none)


class StepRecorder(_Stepping):
    """Runs the real step and notes what it saw; ``replay(trace)`` is the recording, or None."""

    def __init__(self, optimizer: torch.optim.Optimizer, params: Sequence[torch.Tensor]) -> None:
        super().__init__(optimizer, params)
        self.grads: list[Signature | None] = []

    def step(self) -> None:
        self.grads.append(_signature(self.params))
        self.optimizer.step()

    def replay(self, trace: Trace) -> StepReplay | None:
        if any(g is None for g in self.grads):
            return None
        steps: list[list[Event]] = [[] for _ in self.grads]
        inside: set[int] = set()
        for event in trace.events:
            if event.phase == "optimizer":
                if event.iteration >= len(steps):
                    return None
                if event.nbytes > 0:
                    inside.add(event.sid)
                elif event.sid not in inside:
                    return None  # the step freed what the rest of the program allocated
                steps[event.iteration].append(event)
            elif event.nbytes < 0 and event.sid in inside:
                return None  # the rest of the program freed what a step allocated
        sids = {e.sid for step in steps for e in step}
        if any(
            trace.category.get(sid) == "workspace" for sid in _one_time(e for step in steps for e in step)
        ):
            return None  # a device workspace set up once per thread (cuda_model._Workspaces)
        spans = _iterations(trace)
        first = _pattern(trace, _training_events(spans[0])) if spans else None
        repeats = (
            len(steps) == 2
            and len(spans) > 1
            and self.grads[0] == self.grads[1]
            and first is not None
            and first == _pattern(trace, _training_events(spans[1]))
        )
        return StepReplay(
            grads=tuple(g for g in self.grads if g is not None),
            events=tuple(tuple(step) for step in steps),
            category={sid: trace.category[sid] for sid in sids if sid in trace.category},
            host=frozenset(sids & trace.host),
            repeats=repeats,
        )


class StepReplayer(_Stepping):
    """Emits the recorded step's events through ``recorder`` in place of the real step."""

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        params: Sequence[torch.Tensor],
        recording: StepReplay,
        recorder: AllocationRecorder,
    ) -> None:
        super().__init__(optimizer, params)
        self.recording = recording
        self.recorder = recorder
        self.sids: dict[int, int] = {}  # recorded sid -> this trace's

    def step(self) -> None:
        iteration = self.recorder.iteration
        recording = self.recording
        if iteration >= len(recording.events) or _signature(self.params) != recording.grads[iteration]:
            raise ReplayMismatch(f"iteration {iteration}")
        self._emit_step(iteration)

    def repeat_first_iteration(self) -> None:
        """After iteration 0: emit iteration 1 (see the module docstring)."""
        trace, recorder = self.recorder.trace, self.recorder
        if not self.recording.repeats:
            raise ReplayMismatch("the recorded run did not repeat its first iteration")
        first = _iterations(trace)[0]
        training = _training_events(first)
        if _pattern(trace, training) is None:
            raise ReplayMismatch("the first iteration carries storage into the next")
        once = _one_time(training)
        sids: dict[int, int] = {}
        stepped = False
        for event in first:
            if event.phase == "optimizer":
                if not stepped:
                    with recorder.in_phase("optimizer", 1):
                        self._emit_step(1)
                    stepped = True
            elif event.sid not in once:
                # Labelled as the real run labels it: between phases, the resting ("setup", 0).
                with recorder.in_phase(event.phase, 0 if event.phase == "setup" else 1):
                    self._copy(event, sids, trace.category, trace.host)

    def _emit_step(self, iteration: int) -> None:
        recording = self.recording
        for event in recording.events[iteration]:
            self._copy(event, self.sids, recording.category, recording.host)

    def _copy(
        self, event: Event, sids: dict[int, int], category: Mapping[int, str], host: AbstractSet[int]
    ) -> None:
        """Emit ``event`` in this trace's numbering: ``sids`` maps the source's storage ids to this
        trace's (an allocation adds its own), ``category`` and ``host`` are the source's."""
        if event.nbytes < 0:
            self.recorder.emit_free(sids[event.sid], -event.nbytes, event.op)
            return
        sid = self.recorder.emit(event.nbytes, event.op, category.get(event.sid, "other"))
        sids[event.sid] = sid
        if event.sid in host:
            self.recorder.trace.host.add(sid)
