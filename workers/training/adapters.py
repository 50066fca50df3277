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
# The adapter registered per feature type: a model with a text feature is tokenized, one with an
# embedding (and no text) stacks its vectors; the others are tabular. The first match wins.
ADAPTER_BY_FEATURE_TYPE = {"text": "tokenizer", "embedding": "embedding"}


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
    """The registered adapter of ``kind``, or an operator's ``module:Class`` from an allowed
    module (``recipes.check_code_path``); an unknown kind is an error, never a fallback."""
    _load_builtins()
    if ":" in kind:
        from workers.training.recipes import load_code

        adapter = load_code(kind, field_name="recipe.adapter")
        if not isinstance(adapter, type) or not callable(getattr(adapter, "fit", None)):
            raise ValueError(f"recipe.adapter: {kind!r} is not an input adapter class")
        return adapter  # type: ignore[return-value]
    try:
        return ADAPTERS[kind]
    except KeyError:
        raise ValueError(f"unknown input adapter {kind!r}: one of {sorted(ADAPTERS)}") from None


def adapter_for(features: dict[str, str]) -> str:
    """The adapter registered for a model's feature types (``ADAPTER_BY_FEATURE_TYPE``)."""
    kinds = set(features.values())
    return next((a for t, a in ADAPTER_BY_FEATURE_TYPE.items() if t in kinds), DEFAULT_ADAPTER)


def _load_builtins() -> None:
    # The deep adapters live beside their models and register themselves on import; a fixed list
    # of our own modules, imported on the first lookup (they import this module).
    import workers.training.embeddings
    import workers.training.tokenizer  # noqa: F401


def register_adapter(adapter: type[InputAdapter]) -> type[InputAdapter]:
    """Add an adapter kind (usable as a class decorator); a kind is registered once."""
    if adapter.kind in ADAPTERS and ADAPTERS[adapter.kind] is not adapter:
        raise ValueError(f"input adapter {adapter.kind!r} is already registered")
    ADAPTERS[adapter.kind] = adapter
    return adapter
