"""Input adapters: logged samples (a frame of the model's feature columns) → model inputs.

An adapter is fitted on the training rows, saved with the version (its ``kind`` and its
``to_dict`` state in the artifact) and restored with it, so champion, challenger and serving
turn samples into inputs the same way. Its inputs are a tensor or a dict of tensors (first
dimension the row); ``schema_fields`` tells the recipe's factory what it needs to know about them
(the tabular adapter: ``input_width``). Adapters are a registry: one class per kind, unknown kinds
are an error. The tabular encoder is the first.
"""

from __future__ import annotations

from typing import Any, ClassVar, Protocol

import pandas as pd

from workers.training.tabular import Encoder

DEFAULT_ADAPTER = "tabular"


class InputAdapter(Protocol):
    kind: ClassVar[str]

    @classmethod
    def fit(cls, frame: pd.DataFrame, schema: dict[str, Any]) -> InputAdapter:
        """Learn the preprocessing from the training rows (``schema``: task, features, classes)."""
        ...

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> InputAdapter: ...

    def to_dict(self) -> dict[str, Any]: ...

    def schema_fields(self) -> dict[str, Any]:
        """Added to the schema the recipe's factory is called with."""
        ...

    def inputs(self, frame: pd.DataFrame) -> Any:
        """The model inputs of every row of ``frame``, as host tensors."""
        ...


class TabularAdapter:
    """Standardised numbers and one-hot categories (``tabular.Encoder``) as one float32 tensor."""

    kind: ClassVar[str] = "tabular"

    def __init__(self, encoder: Encoder) -> None:
        self.encoder = encoder

    @classmethod
    def fit(cls, frame: pd.DataFrame, schema: dict[str, Any]) -> TabularAdapter:
        return cls(Encoder.fit(frame, schema["features"]))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TabularAdapter:
        return cls(Encoder.from_dict(data))

    def to_dict(self) -> dict[str, Any]:
        return self.encoder.to_dict()

    def schema_fields(self) -> dict[str, Any]:
        return {"input_width": self.encoder.width}

    def inputs(self, frame: pd.DataFrame) -> Any:
        import torch  # lazy: see the package docstring

        return torch.from_numpy(self.encoder.transform(frame))


ADAPTERS: dict[str, type[InputAdapter]] = {TabularAdapter.kind: TabularAdapter}


def adapter_class(kind: str) -> type[InputAdapter]:
    """The registered adapter of ``kind``; an unknown kind is an error, never a fallback."""
    try:
        return ADAPTERS[kind]
    except KeyError:
        raise ValueError(f"unknown input adapter {kind!r}: one of {sorted(ADAPTERS)}") from None


def register_adapter(adapter: type[InputAdapter]) -> type[InputAdapter]:
    """Add an adapter kind (usable as a class decorator); a kind is registered once."""
    if adapter.kind in ADAPTERS and ADAPTERS[adapter.kind] is not adapter:
        raise ValueError(f"input adapter {adapter.kind!r} is already registered")
    ADAPTERS[adapter.kind] = adapter
    return adapter
