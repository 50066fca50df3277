"""Allocation traces extrapolated in the batch size, so the planner traces few batch sizes.

A training step at two batch sizes runs the same ops in the same order, and each storage it
allocates is a fixed part plus a per-row part: weights, gradients, optimizer state and most
workspaces are fixed, inputs and activations (for fixed non-batch dimensions: sequence length,
image size) are proportional to the rows. So two traces of the same structure give every event of
the trace as a line in the batch size, and the peak at any batch is the peak of the running sum of
those lines (on CUDA, the allocator replay of them). The peak itself is not a line (which moment
peaks moves with the batch, and fixed and per-row parts peak at different moments), which is why a
line through two peaks over- or under-shoots and one through every event does not.

Nothing here is trusted on its own: the planner verifies the batch it picks with a real trace, and
only uses a line between traces whose event structure and non-batch dimensions are identical.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch.utils._pytree import tree_flatten

from workers.memory.cpu_kernels import BATCH_SCALED_SCRATCH_OPS
from workers.memory.loop import Batch
from workers.memory.trace import Event, Trace


@dataclass(frozen=True)
class TraceProfile:
    """What of one trace a line needs: its event sizes and what must match for two to be paired."""

    batch: int
    structure: int  # hash of (sid, op, phase, iteration) per event: equal for the same program
    shapes: tuple[object, ...]  # the batch's leaves without their first dimension
    sizes: torch.Tensor  # int64 bytes per event, frees negative
    alloc_of: torch.Tensor  # per event, the index of its storage's allocation event
    trace: Trace | None  # kept for the allocator replay (CUDA); None on CPU
    scaled_scratch: torch.Tensor | None = None  # per event: kernel scratch that grows with the rows


def profile_of(trace: Trace, batch: int, example: Batch, keep_trace: bool) -> TraceProfile | None:
    """The trace's profile, or None when a free has no allocation in the trace (nothing to mirror)."""
    first: dict[int, int] = {}
    alloc_of: list[int] = []
    for index, event in enumerate(trace.events):
        if event.nbytes > 0:
            first[event.sid] = index
            alloc_of.append(index)
        elif event.sid in first:
            alloc_of.append(first[event.sid])
        else:
            return None
    structure = hash(tuple((e.sid, e.op, e.phase, e.iteration) for e in trace.events))
    scaled = [
        e.op in BATCH_SCALED_SCRATCH_OPS and trace.category.get(e.sid) == "workspace" for e in trace.events
    ]
    return TraceProfile(
        batch=batch,
        structure=structure,
        shapes=batch_shapes(example, with_batch=False),
        sizes=torch.tensor([e.nbytes for e in trace.events], dtype=torch.int64),
        alloc_of=torch.tensor(alloc_of, dtype=torch.int64),
        trace=trace if keep_trace else None,
        scaled_scratch=torch.tensor(scaled, dtype=torch.bool),
    )


def batch_shapes(example: Batch, *, with_batch: bool = True) -> tuple[object, ...]:
    """Shapes, dtypes and strides of a batch's tensors (and its tree), what a fake trace sees of it."""
    leaves, spec = tree_flatten(example)
    described: list[object] = [str(spec)]
    for leaf in leaves:
        if isinstance(leaf, torch.Tensor):
            shape = tuple(leaf.shape) if with_batch or leaf.dim() == 0 else tuple(leaf.shape[1:])
            described.append((shape, leaf.dtype, leaf.stride()[1:], leaf.requires_grad, leaf.device.type))
        else:
            described.append(repr(leaf))
    return tuple(described)


def pairable(a: TraceProfile | None, b: TraceProfile | None) -> bool:
    return (
        a is not None
        and b is not None
        and a.batch != b.batch
        and a.structure == b.structure
        and a.shapes == b.shapes
        and a.sizes.numel() == b.sizes.numel()
    )


def divisible_line(p: TraceProfile) -> BatchLine:
    """Event lines guessed from one trace: an allocation whose size the traced batch divides is
    taken as per-row, any other as fixed, except measured kernel scratch that the estimator scales
    with the rows (convolutions: ``cpu_kernels.BATCH_SCALED_SCRATCH_OPS``), per-row too. Traced at
    a prime batch that divides no parameter's size (the planner's probe), a fixed storage is rarely
    divisible; the guess only picks which batch to trace next (a wrong one costs a trace, never a
    plan: plans are traced batches)."""
    per_row = torch.remainder(p.sizes, p.batch) == 0
    if p.scaled_scratch is not None:
        per_row |= p.scaled_scratch
    sizes = torch.where(per_row, 2 * p.sizes, p.sizes)
    doubled = TraceProfile(p.batch * 2, p.structure, p.shapes, sizes, p.alloc_of, None)
    return BatchLine(p, doubled)


class BatchLine:
    """Every event of a trace as ``size(b) = size(b0) + (b - b0) * (size(b1) - size(b0)) / (b1 - b0)``,
    rounded down; a free mirrors its allocation, so extrapolated traces free what they allocate."""

    def __init__(self, p: TraceProfile, q: TraceProfile) -> None:
        self.base = p
        self.rows = q.batch - p.batch
        self.at_base = p.sizes[p.alloc_of]
        self.per_rows = q.sizes[p.alloc_of] - self.at_base
        self.sign = torch.where(p.sizes > 0, 1, -1)

    def sizes(self, batch: int) -> torch.Tensor:
        grown = torch.div(self.per_rows * (batch - self.base.batch), self.rows, rounding_mode="floor")
        return self.sign * (self.at_base + grown).clamp(min=0)

    def peak(self, batch: int) -> int:
        """Peak of live bytes at ``batch`` (the CPU figure: no allocator)."""
        return max(0, int(torch.cumsum(self.sizes(batch), 0).max()))

    def trace_at(self, batch: int) -> Trace:
        """The trace extrapolated to ``batch``, for the allocator replay (CUDA profiles only)."""
        base = self.base.trace
        if base is None:
            raise ValueError("a CPU profile keeps no trace")
        events = [
            Event(e.sid, n, e.op, e.phase, e.iteration)
            for e, n in zip(base.events, self.sizes(batch).tolist(), strict=True)
        ]
        return Trace(events=events, category=base.category, initial=base.initial, host=base.host)


def largest_fitting(used: Callable[[int], int], usable: int, lo: int, hi: int) -> int:
    """Largest batch in ``[lo, hi]`` whose ``used(batch)`` fits ``usable`` (``lo`` if none above it
    does); ``used`` grows with the batch. Bisection: a few dozen replays, no trace."""
    if used(hi) <= usable:
        return hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if used(mid) <= usable else (lo, mid)
    return lo
