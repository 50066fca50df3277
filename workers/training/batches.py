"""The training data protocol: rows of model inputs and targets, handed out batch by batch.

An input adapter (``workers.training.adapters``) turns logged samples into ``TrainingData``; the
engine draws index batches from it and moves each batch alone to the device, so the dataset
stays on the host and the device holds what the estimator sized: the model, its optimizer state
and one micro-batch. Inputs are a tensor or a dict of tensors whose first dimension is the row.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

Inputs = Any  # a tensor, or a dict of tensors; dim 0 is the row


class TrainingData(Protocol):
    """Rows the engine trains on, in time order (the validation slice is the newest rows)."""

    def __len__(self) -> int: ...

    def rows(self, start: int, stop: int) -> TrainingData:
        """The contiguous rows ``[start, stop)``."""
        ...

    def batch(self, index: Any, device: Any = "cpu") -> tuple[Inputs, Any]:
        """``(inputs, targets)`` of the rows in ``index`` (a 1-d tensor), moved to ``device``."""
        ...

    def planning_index(self, n: int) -> Any:
        """The ``n`` rows the planner sizes a batch with: the largest inputs (the longest texts)."""
        ...


def select(inputs: Inputs, index: Any) -> Inputs:
    """The rows ``index`` (a slice or an index tensor) of a tensor or of each tensor of a dict."""
    if isinstance(inputs, Mapping):
        return {name: value[index] for name, value in inputs.items()}
    return inputs[index]


def to_device(inputs: Inputs, device: Any) -> Inputs:
    if isinstance(inputs, Mapping):
        return {name: value.to(device) for name, value in inputs.items()}
    return inputs.to(device)


@dataclass(frozen=True)
class TensorRows:
    """Training data held as host tensors: the first implementation, for any adapter whose inputs
    fit in host memory (the tabular one)."""

    inputs: Inputs
    targets: Any

    def __len__(self) -> int:
        return int(len(self.targets))

    def rows(self, start: int, stop: int) -> TensorRows:
        return TensorRows(select(self.inputs, slice(start, stop)), self.targets[start:stop])

    def batch(self, index: Any, device: Any = "cpu") -> tuple[Inputs, Any]:
        return to_device(select(self.inputs, index), device), self.targets[index].to(device)

    def planning_index(self, n: int) -> Any:
        import torch  # lazy: imported by the engine only

        return torch.arange(n) % len(self)  # every row has the same shape: any rows will do


def forward(net: Any, inputs: Inputs) -> Any:
    """``net(inputs)``, or ``net(**inputs)`` for a dict of named inputs."""
    return net(**inputs) if isinstance(inputs, Mapping) else net(inputs)
