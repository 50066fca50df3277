"""Reference summaries: everything a drift check needs from the reference, computed once.

A summary holds plain numpy arrays and JSON scalars only, so it can be stored next to the
ReferenceDataset (``to_bytes``) and loaded by every scheduled check without re-reading or
re-sorting the reference rows.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import pandas as pd

ColumnType = Literal["numerical", "categorical"]
COLUMN_TYPES: tuple[str, ...] = ("numerical", "categorical")
_FORMAT_VERSION = 1


@dataclass(frozen=True)
class NumericalSummary:
    """Sorted finite values of one numerical reference column (missing and ±inf removed)."""

    sorted_values: np.ndarray
    std: float
    n_unique: int

    @property
    def n(self) -> int:
        return int(self.sorted_values.size)

    def value_counts(self) -> dict[Any, int]:
        values, counts = np.unique(self.sorted_values, return_counts=True)
        return {v.item(): int(c) for v, c in zip(values, counts, strict=True)}


@dataclass(frozen=True)
class CategoricalSummary:
    """Per-category counts of one categorical reference column (missing and ±inf removed)."""

    counts: dict[Any, int]

    @property
    def n(self) -> int:
        return int(sum(self.counts.values()))

    @property
    def n_unique(self) -> int:
        return len(self.counts)

    def value_counts(self) -> dict[Any, int]:
        return dict(self.counts)


@dataclass(frozen=True)
class ReferenceSummary:
    """What ``data_drift`` needs from a reference set, per column."""

    columns: dict[str, ColumnType]
    numerical: dict[str, NumericalSummary] = field(default_factory=dict)
    categorical: dict[str, CategoricalSummary] = field(default_factory=dict)
    n_rows: int = 0

    def column(self, name: str) -> NumericalSummary | CategoricalSummary:
        return self.numerical[name] if name in self.numerical else self.categorical[name]

    def categories(self) -> dict[str, list[Any]]:
        """Allowed categories per categorical column (the schema seen in the reference)."""
        return {name: list(s.counts) for name, s in self.categorical.items()}

    def to_bytes(self) -> bytes:
        """Serialise to an ``.npz`` blob: no pickle, so loading a stored blob runs no code."""
        arrays = {f"num:{name}": s.sorted_values for name, s in self.numerical.items()}
        meta = {
            "version": _FORMAT_VERSION,
            "n_rows": self.n_rows,
            "columns": self.columns,
            "numerical": {n: {"std": s.std, "n_unique": s.n_unique} for n, s in self.numerical.items()},
            "categorical": {n: _counts_to_json(s.counts) for n, s in self.categorical.items()},
        }
        arrays["__meta__"] = np.array(json.dumps(meta))
        buffer = io.BytesIO()
        np.savez(buffer, **arrays)  # type: ignore[arg-type]  # numpy's stub types allow_pickle only
        return buffer.getvalue()

    @classmethod
    def from_bytes(cls, blob: bytes) -> ReferenceSummary:
        with np.load(io.BytesIO(blob), allow_pickle=False) as data:
            meta = json.loads(str(data["__meta__"]))
            if meta["version"] != _FORMAT_VERSION:
                raise ValueError(f"unsupported ReferenceSummary format {meta['version']}")
            numerical = {
                name: NumericalSummary(data[f"num:{name}"], float(m["std"]), int(m["n_unique"]))
                for name, m in meta["numerical"].items()
            }
        categorical = {
            name: CategoricalSummary(_counts_from_json(pairs)) for name, pairs in meta["categorical"].items()
        }
        return cls(meta["columns"], numerical, categorical, int(meta["n_rows"]))


def _counts_to_json(counts: dict[Any, int]) -> list[list[Any]]:
    # A list of pairs, not a JSON object: keys keep their type (1 and "1" stay distinct).
    return [[key, count] for key, count in counts.items()]


def _counts_from_json(pairs: list[list[Any]]) -> dict[Any, int]:
    return {key: int(count) for key, count in pairs}


def finite_values(series: pd.Series) -> np.ndarray:
    """Numerical values as float64 with missing and ±inf removed (evidently drops both)."""
    values = series.to_numpy(dtype="float64", na_value=np.nan)
    return values[np.isfinite(values)]


def _is_missing_key(key: Any) -> bool:
    # value_counts already drops NaN/None; ±inf is dropped here, as evidently does.
    return isinstance(key, float | np.floating) and not np.isfinite(key)


def category_counts(series: pd.Series) -> dict[Any, int]:
    """Counts per category, missing and ±inf dropped, keys as plain Python scalars."""
    counts = series.value_counts(dropna=True, sort=False)
    out: dict[Any, int] = {}
    for key, count in zip(counts.index.tolist(), counts.to_numpy().tolist(), strict=True):
        key = key.item() if isinstance(key, np.generic) else key
        # count > 0: a pandas "category" dtype also lists categories it never saw.
        if count > 0 and not _is_missing_key(key):
            out[key] = int(count)
    return out


def summarize_numerical(series: pd.Series) -> NumericalSummary:
    values = np.sort(finite_values(series), kind="stable")
    std = float(np.std(values)) if values.size else 0.0
    n_unique = int(np.count_nonzero(np.diff(values)) + 1) if values.size else 0
    return NumericalSummary(values, std, n_unique)


def summarize_reference(reference: pd.DataFrame, columns: dict[str, ColumnType]) -> ReferenceSummary:
    """Summarise the reference once per model version; ``data_drift`` then reuses it."""
    _check_columns(reference, columns)
    numerical = {n: summarize_numerical(reference[n]) for n, t in columns.items() if t == "numerical"}
    categorical = {
        n: CategoricalSummary(category_counts(reference[n])) for n, t in columns.items() if t == "categorical"
    }
    return ReferenceSummary(dict(columns), numerical, categorical, int(len(reference)))


def _check_columns(frame: pd.DataFrame, columns: dict[str, ColumnType]) -> None:
    missing = [name for name in columns if name not in frame.columns]
    if missing:
        raise ValueError(f"columns missing from the data: {missing}")
    bad = {name: kind for name, kind in columns.items() if kind not in COLUMN_TYPES}
    if bad:
        raise ValueError(f"column types must be 'numerical' or 'categorical', got {bad}")
