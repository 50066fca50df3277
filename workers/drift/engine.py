"""Data drift and prediction drift, with evidently 0.7.23's default decisions."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, NotRequired, TypedDict, cast

import numpy as np
import pandas as pd

from workers.drift.columns import Columns, column_values, n_rows
from workers.drift.multivariate import MultivariateDriftDict
from workers.drift.sorts import each_column
from workers.drift.stats import STATTESTS, SampleDict, StatTest
from workers.drift.summary import ColumnCounts, ReferenceSummary, _check_columns, summarize_reference
from workers.features.base import DriftScore
from workers.features.registry import ColumnType, feature_type, prediction_type


class ColumnDriftDict(TypedDict):
    """One column's drift as stored in a check (``QualityCheck.drift["columns"][name]``)."""

    column_type: str
    method: str | None
    method_display: str | None
    score: float | None
    threshold: float | None
    drifted: bool
    n_reference: int
    n_current: int
    note: str | None
    higher_is_drift: bool | None
    sample: NotRequired[SampleDict | None]  # a score made from a sample (absent in older checks)


class DriftDict(TypedDict):
    """A window's data drift as stored in a check (``QualityCheck.drift``)."""

    columns: dict[str, ColumnDriftDict]
    share: float
    dataset_drift: bool
    drift_share: float
    number_of_drifted_columns: int
    multivariate: NotRequired[MultivariateDriftDict]  # added by the check when the reference has one
    # feature -> descriptor -> its drift entry, for types that derive descriptors (text)
    descriptors: NotRequired[dict[str, dict[str, ColumnDriftDict]]]


DEFAULT_DRIFT_SHARE = 0.5  # evidently DataDriftPreset(drift_share=0.5): dataset drift if share >= it


@dataclass(frozen=True)
class ColumnDrift:
    """One column's drift decision. ``method`` is evidently's stattest name ("ks", ...)."""

    column_type: str
    method: str | None
    method_display: str | None
    score: float | None
    threshold: float | None
    drifted: bool
    n_reference: int
    n_current: int
    note: str | None = None
    # True: a distance, drift at or above the threshold; False: a p-value, drift below it;
    # None: not tested. Stored with the score, so no reader restates which tests are p-values.
    higher_is_drift: bool | None = None
    # The score was made from a uniform sample of the window's values (a very large window):
    # its size and stated error. None: from all of them.
    sample: SampleDict | None = None

    @property
    def stattest(self) -> str | None:
        return self.method

    def to_dict(self) -> ColumnDriftDict:
        return cast(ColumnDriftDict, asdict(self))


@dataclass(frozen=True)
class DriftResult:
    columns: dict[str, ColumnDrift]
    share: float
    dataset_drift: bool
    drift_share: float = DEFAULT_DRIFT_SHARE

    @property
    def number_of_drifted_columns(self) -> int:
        return sum(c.drifted for c in self.columns.values())

    def to_dict(self) -> DriftDict:
        """JSON-serialisable (scores are finite floats or None, never NaN)."""
        return {
            "columns": {name: c.to_dict() for name, c in self.columns.items()},
            "share": self.share,
            "dataset_drift": self.dataset_drift,
            "drift_share": self.drift_share,
            "number_of_drifted_columns": self.number_of_drifted_columns,
        }


def _json_float(value: float) -> float | None:
    return float(value) if np.isfinite(value) else None


def _empty_column(column_type: str, n_reference: int, n_current: int) -> ColumnDrift:
    # evidently raises on an all-missing column; we report "not tested" and let the
    # data-quality check flag the broken feed.
    side = "reference" if n_reference == 0 else "current"
    note = f"no non-missing values in the {side} data: not tested"
    return ColumnDrift(column_type, None, None, None, None, False, n_reference, n_current, note)


def column_drift(
    summary: Any, series: pd.Series, column_type: ColumnType, method: str | None = None
) -> ColumnDrift:
    """Drift of one column of the current window against its reference summary, by the test
    its feature type chooses, or by ``method``, one of the type's ``methods()``."""
    kind = feature_type(column_type)
    scored = kind.drift(summary, series) if method is None else kind.drift_by(method, summary, series)
    return _column_result(scored, summary, column_type)


def counted_drift(summary: Any, counted: ColumnCounts, column_type: ColumnType) -> ColumnDrift:
    """``column_drift`` (by the type's own test) of a window given as its counts: a counted
    type's window made of whole summarised hours (``FeatureKind.counted``)."""
    return _column_result(feature_type(column_type).drift_counted(summary, counted), summary, column_type)


def _column_result(scored: DriftScore | None, summary: Any, column_type: ColumnType) -> ColumnDrift:
    if scored is None:
        return _empty_column(column_type, summary.n, 0)
    test = scored.test
    threshold = test.threshold if scored.threshold is None else scored.threshold
    return ColumnDrift(
        column_type,
        test.name,
        test.display_name,
        _json_float(scored.score),
        threshold,
        test.drifted(scored.score, threshold),
        summary.n,
        scored.n_current,
        sample_note(scored.sample),
        higher_is_drift=test.higher_is_drift,
        sample=scored.sample,
    )


def sample_note(sample: SampleDict | None) -> str | None:
    if sample is None:
        return None
    return (
        f"from a uniform sample of {sample['rows']:,} of the window's {sample['of']:,} values: "
        f"the score's expected error is at most {sample['error']:.2g}"
    )


def data_drift(
    reference: pd.DataFrame | ReferenceSummary,
    current: Columns,
    columns: dict[str, ColumnType],
    *,
    drift_share: float = DEFAULT_DRIFT_SHARE,
    methods: Mapping[ColumnType, str] | None = None,
) -> DriftResult:
    """Per-column drift and dataset drift of ``current`` against ``reference``.

    Decisions equal evidently 0.7.23's ``DataDriftPreset()`` with an explicit column
    definition (stattest choice, thresholds, NaN dropping, share >= 0.5). One deliberate
    difference: ±inf is treated as missing everywhere, where evidently's dataset-level count
    keeps it in a column without NaN and gets a NaN score. ``current`` may be a DataFrame, a
    mapping of column name to array, or a pyarrow Table. ``methods`` picks a drift method per
    feature type (e.g. ``{"embedding": "classifier_mw"}``); other types take their default.
    """
    summary = (
        reference if isinstance(reference, ReferenceSummary) else summarize_reference(reference, columns)
    )
    _check_columns(current, columns)
    unknown = [name for name in columns if name not in summary.columns]
    if unknown:
        raise ValueError(f"columns not in the reference summary: {unknown}")
    chosen = methods or {}

    def drift_of(name: str) -> ColumnDrift:
        kind = columns[name]
        return column_drift(summary.column(name), column_values(current, name), kind, chosen.get(kind))

    names = list(columns)
    return drift_result(
        dict(zip(names, each_column(drift_of, names, n_rows(current)), strict=True)), drift_share
    )


def drift_result(results: dict[str, ColumnDrift], drift_share: float = DEFAULT_DRIFT_SHARE) -> DriftResult:
    """Dataset drift from the columns' (``column_drift``, in column order): the drifted share."""
    share = sum(r.drifted for r in results.values()) / len(results) if results else 0.0
    return DriftResult(results, share, bool(results) and share >= drift_share, drift_share)


def prediction_drift(
    reference: pd.Series | ReferenceSummary,
    current: pd.Series,
    *,
    task: str,
    column: str = "prediction",
) -> ColumnDrift:
    """Drift of the model's output: categorical for classification, numerical for regression."""
    if task not in ("classification", "regression"):
        raise ValueError(f"task must be 'classification' or 'regression', got {task!r}")
    kind = prediction_type(task)
    ref = reference if isinstance(reference, ReferenceSummary) else pd.DataFrame({column: reference})
    return data_drift(ref, pd.DataFrame({column: current}), {column: kind}).columns[column]


def stattest(name: str) -> StatTest:
    """Look up a stattest by evidently's short name."""
    return STATTESTS[name]
