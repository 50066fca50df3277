"""The embedding stack: a model's embedding features (float32 vectors of a fixed ``dim``) beside its
tabular features, as one float32 matrix, and the MLP the ``embedding-*`` recipes train on it.

Vectors are taken as logged (the upstream encoder already scaled them); the tabular features go
through the tabular ``Encoder``. A missing vector (ingest refuses one, but a reference row may
lack it) is zeros.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import pandas as pd

from workers.features.embedding import vector_or_none
from workers.training.adapters import register_adapter
from workers.training.tabular import Encoder, mlp_factory


@dataclass
class EmbeddingAdapter:
    kind: ClassVar[str] = "embedding"

    encoder: Encoder  # the tabular features
    dims: dict[str, int]  # embedding feature → its width

    @classmethod
    def fit(cls, frame: pd.DataFrame, schema: dict[str, Any]) -> EmbeddingAdapter:
        features = schema["features"]
        embedded = [n for n, t in features.items() if t == "embedding"]
        tabular = {n: t for n, t in features.items() if t in ("numerical", "categorical")}
        dims = {name: _width(frame[name], name) for name in embedded}
        return cls(Encoder.fit(frame, tabular), dims)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EmbeddingAdapter:
        return cls(Encoder.from_dict(data["tabular"]), {k: int(v) for k, v in data["dims"].items()})

    def to_dict(self) -> dict[str, Any]:
        return {"tabular": self.encoder.to_dict(), "dims": dict(self.dims)}

    def schema_fields(self) -> dict[str, Any]:
        return {
            "input_width": self.encoder.width + sum(self.dims.values()),
            "embedding_dims": dict(self.dims),
        }

    def inputs(self, frame: pd.DataFrame) -> Any:
        import torch  # lazy: see the package docstring

        parts = [self.encoder.transform(frame)]
        parts += [_stack(frame[name], dim) for name, dim in self.dims.items()]
        return torch.from_numpy(np.concatenate(parts, axis=1).astype("float32"))


register_adapter(EmbeddingAdapter)


def _width(values: pd.Series, name: str) -> int:
    for value in values:
        vector = vector_or_none(value)
        if vector is not None:
            return int(vector.size)
    raise ValueError(f"embedding feature {name!r} has no vector in the training rows")


def _stack(values: pd.Series, dim: int) -> np.ndarray:
    out = np.zeros((len(values), dim), dtype="float32")
    for i, value in enumerate(values):
        vector = vector_or_none(value)
        if vector is not None and vector.size == dim:
            out[i] = vector
    return out


def embedding_mlp_factory(schema: dict[str, Any], hyperparameters: dict[str, Any]) -> Any:
    """The ``embedding-*`` recipes' MLP over the stacked vectors and tabular features."""
    return mlp_factory(schema, {"hidden": 128, "layers": 2, **hyperparameters})
