"""Training checkpoints: everything a killed run needs to go on exactly where it stopped.

Written at the end of every epoch and every ``recipe.checkpoint_every_steps`` optimizer steps:
the weights, the optimizer and scheduler state, the RNG states (torch's global one, which dropout
draws from, and the epoch's shuffling generator as it was before this epoch's order was drawn),
the data position (epoch, optimizer steps done in it), the losses so far and the early-stopping
best. Resuming redraws the same order, skips the steps done and continues: on CPU with a fixed
seed the final weights equal an uninterrupted run's.

A checkpoint is a ``torch.save`` file read back with ``weights_only=True`` (tensors, numbers,
strings, lists, dicts: nothing is unpickled that could run code). It belongs to one plan and one
training set (``fingerprint``): any other is ignored and the run starts over.
"""

from __future__ import annotations

import hashlib
import io
import os
from pathlib import Path
from typing import Any, Protocol

FORMAT = 1


class CheckpointStore(Protocol):
    """Where a job's checkpoint lives (the platform: the artifact storage)."""

    def load(self) -> bytes | None: ...

    def due(self) -> bool:
        """Whether a checkpoint written now would be kept (asked before one is built: building one
        copies the weights and optimizer state and serialises them)."""
        ...

    def save(self, raw: bytes) -> None: ...


class MemoryStore:
    """A checkpoint store in memory (tests, notebooks)."""

    def __init__(self) -> None:
        self.raw: bytes | None = None
        self.saves = 0

    def load(self) -> bytes | None:
        return self.raw

    def due(self) -> bool:
        return True

    def save(self, raw: bytes) -> None:
        self.raw, self.saves = raw, self.saves + 1


class FileStore:
    """A checkpoint store in one local file (a run on one machine, the benchmark's killed jobs).
    Each save is written to a temporary name beside it, flushed to disk and renamed over the old
    file: a kill at any moment leaves the previous checkpoint or the new one, never a torn file."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.saves = 0

    def load(self) -> bytes | None:
        try:
            return self.path.read_bytes()
        except FileNotFoundError:
            return None

    def due(self) -> bool:
        return True

    def save(self, raw: bytes) -> None:
        partial = self.path.with_name(f"{self.path.name}.{os.getpid()}.partial")
        with open(partial, "wb") as file:
            file.write(raw)
            file.flush()
            os.fsync(file.fileno())  # the bytes are on disk before the name points at them
        os.replace(partial, self.path)  # atomic on POSIX: readers see the old file or the new one
        self.saves += 1


def fingerprint(data: Any, plan: Any, recipe: Any) -> str:
    """What a checkpoint must match to be resumed: the rows (targets and inputs), the plan's
    batch shape and the recipe."""
    import torch  # lazy: see the package docstring

    digest = hashlib.sha256()
    digest.update(repr((plan.batch_size, plan.accumulation_steps, plan.precision, recipe.to_dict())).encode())
    digest.update(str(len(data)).encode())
    inputs = data.inputs if isinstance(data.inputs, dict) else {"x": data.inputs}
    for name, tensor in sorted({**inputs, "targets": data.targets}.items()):
        digest.update(name.encode())
        digest.update(torch.as_tensor(tensor).contiguous().numpy().tobytes())
    return digest.hexdigest()


def dump(state: dict[str, Any]) -> bytes:
    import torch  # lazy: see the package docstring

    buffer = io.BytesIO()
    torch.save({"format": FORMAT, **state}, buffer)
    return buffer.getvalue()


def read(raw: bytes | None, expected: str) -> dict[str, Any] | None:
    """The checkpoint's state, or None when there is none or it belongs to another run."""
    import torch  # lazy: see the package docstring

    if not raw:
        return None
    try:
        state = torch.load(io.BytesIO(raw), weights_only=True, map_location="cpu")
    except Exception:  # a torn write (killed mid-save) or a foreign file: start over
        return None
    if not isinstance(state, dict) or state.get("format") != FORMAT or state.get("fingerprint") != expected:
        return None
    return state
