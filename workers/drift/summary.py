"""Reference summaries: everything a drift check needs from the reference, computed once.

A summary holds plain numpy arrays and JSON scalars only, so it can be stored next to the
ReferenceDataset (``to_bytes``) and loaded by every scheduled check without re-reading or
re-sorting the reference rows.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from workers.drift.columns import column_names
from workers.features.registry import BUILTINS, ColumnType, check_column_types, feature_type

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
class ColumnCounts:
    """A window's column as its per-value counts (``category_counts``: missing dropped, keys in
    the order of their first row) and its missing rows: all that the tests exact on fixed values
    read (chi-square, Z, Jensen-Shannon on categories, the drill-down's bars, out-of-schema
    shares). Merged from per-hour summaries (``counts_merge``), it equals the counts of the
    hours' rows read one after another."""

    counts: dict[Any, int]
    missing: int


def counts_merge(parts: list[ColumnCounts]) -> ColumnCounts:
    """The counts of parts' rows read one after another, in that order: a key first seen in a
    later part comes after every key of the earlier ones."""
    merged: dict[Any, int] = {}
    for part in parts:
        for key, count in part.counts.items():
            merged[key] = merged.get(key, 0) + count
    return ColumnCounts(merged, sum(part.missing for part in parts))


@dataclass(frozen=True)
class ReferenceSummary:
    """What ``data_drift`` needs from a reference set: per column, its type's summary."""

    columns: dict[str, ColumnType]
    summaries: dict[str, Any] = field(default_factory=dict)  # column -> its type's summary
    n_rows: int = 0

    def column(self, name: str) -> Any:
        return self.summaries[name]

    def of_type(self, type_name: str) -> dict[str, Any]:
        """The summaries of the columns of one feature type."""
        return {n: s for n, s in self.summaries.items() if self.columns[n] == type_name}

    def categories(self) -> dict[str, list[Any]]:
        """Allowed values per column whose type keeps a schema (categorical: the categories seen
        in the reference)."""
        out = {}
        for name, summary in self.summaries.items():
            allowed = feature_type(self.columns[name]).allowed_values(summary)
            if allowed is not None:
                out[name] = allowed
        return out

    def to_bytes(self) -> bytes:
        """Serialise to an ``.npz`` blob: no pickle, so loading a stored blob runs no code.

        Per type name, ``meta[type][column]`` holds the type's JSON metadata and its arrays are
        named ``f"{array_prefix}{suffix}:{column}"`` (format 1: numerical's are ``num:<name>``).
        """
        meta: dict[str, Any] = {"version": _FORMAT_VERSION, "n_rows": self.n_rows, "columns": self.columns}
        meta |= {name: {} for name in BUILTINS}  # format 1 always lists both
        arrays: dict[str, np.ndarray] = {}
        for name, summary in self.summaries.items():
            kind = feature_type(self.columns[name])
            column_meta, column_arrays = kind.summary_dump(summary)
            meta.setdefault(kind.name, {})[name] = column_meta
            for suffix, array in column_arrays.items():
                arrays[f"{kind.array_prefix}{suffix}:{name}"] = array
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
            columns: dict[str, ColumnType] = meta["columns"]
            summaries = {}
            for name, type_name in columns.items():
                kind = feature_type(type_name)
                arrays = {s: data[f"{kind.array_prefix}{s}:{name}"] for s in kind.summary_arrays}
                summaries[name] = kind.summary_load(meta[type_name][name], arrays)
        return cls(columns, summaries, int(meta["n_rows"]))


def counts_to_json(counts: dict[Any, int]) -> list[list[Any]]:
    # A list of pairs, not a JSON object: keys keep their type (1 and "1" stay distinct).
    return [[key, count] for key, count in counts.items()]


def counts_from_json(pairs: list[list[Any]]) -> dict[Any, int]:
    return {key: int(count) for key, count in pairs}


def finite_values(series: pd.Series) -> np.ndarray:
    """Numerical values as float64 with missing and ±inf removed (evidently drops both); the
    column's own array (not a copy) when it holds nothing to drop: callers sort a copy of it."""
    if series.dtype == "float64":  # the window's numbers: a view, copied only to drop values
        values = series.to_numpy()
    else:
        values = series.to_numpy(dtype="float64", na_value=np.nan)
    finite = np.isfinite(values)
    return values if finite.all() else values[finite]


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
    summaries = {name: feature_type(kind).summarize(reference[name]) for name, kind in columns.items()}
    return ReferenceSummary(dict(columns), summaries, int(len(reference)))


def _check_columns(frame: Any, columns: dict[str, ColumnType]) -> None:
    missing = [name for name in columns if name not in column_names(frame)]
    if missing:
        raise ValueError(f"columns missing from the data: {missing}")
    check_column_types(columns)
