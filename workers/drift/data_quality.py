"""Data-quality signals of a window, so a broken feed is not mistaken for drift.

A window flagged ``broken_feed`` should still be stored and alerted on, but its drift is
suspect and its rows must never be used for retraining.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import pandas as pd

from workers.drift.columns import Columns, column_values, n_rows
from workers.drift.summary import ColumnCounts, _check_columns
from workers.features.registry import ColumnType, feature_type

# Thresholds (documented defaults; callers may pass a MonitoringPolicy's values instead):
MAX_MISSING_SHARE = 0.2  # a feature more than 20% missing (NaN, None, ±inf, unparsable) is broken
MAX_OUT_OF_SCHEMA_SHARE = 0.05  # more than 5% of a feature's values never seen in the schema
MIN_ROWS = 1  # an empty window is broken by definition


def column_quality(
    series: pd.Series, kind: ColumnType, allowed: Iterable[Any] | None, n: int
) -> dict[str, Any]:
    """The missing share (every type), then the type's own rules (categorical: out of schema)."""
    feature = feature_type(kind)
    missing = feature.missing(series)
    n_missing = int(missing.sum())
    out: dict[str, Any] = {
        "missing_count": n_missing,
        "missing_share": n_missing / n if n else None,
    }
    return out | feature.quality(series, missing, allowed, n)


def counted_quality(
    counted: ColumnCounts, kind: ColumnType, allowed: Iterable[Any] | None, n: int
) -> dict[str, Any]:
    """``column_quality`` of a counted type's column given as its counts."""
    out: dict[str, Any] = {
        "missing_count": counted.missing,
        "missing_share": counted.missing / n if n else None,
    }
    return out | feature_type(kind).quality_counted(counted, allowed, n)


def _reasons(
    name: str, quality: dict[str, Any], max_missing_share: float, max_out_of_schema_share: float
) -> list[str]:
    reasons = []
    if quality["missing_share"] is not None and quality["missing_share"] > max_missing_share:
        reasons.append(f"{name}: {quality['missing_share']:.1%} missing (> {max_missing_share:.0%})")
    share = quality.get("out_of_schema_share")
    if share is not None and share > max_out_of_schema_share:
        reasons.append(f"{name}: {share:.1%} out-of-schema categories (> {max_out_of_schema_share:.0%})")
    return reasons


def data_quality(
    current: Columns,
    columns: dict[str, ColumnType],
    *,
    categories: Mapping[str, Iterable[Any]] | None = None,
    max_missing_share: float = MAX_MISSING_SHARE,
    max_out_of_schema_share: float = MAX_OUT_OF_SCHEMA_SHARE,
) -> dict[str, Any]:
    """Missing share per feature (±inf counts as missing), out-of-schema share per categorical
    feature with allowed ``categories`` (e.g. ``ReferenceSummary.categories()``), and
    ``broken_feed`` with the ``reasons`` when a threshold is exceeded or the window is empty.
    """
    _check_columns(current, columns)
    n = n_rows(current)
    allowed = categories or {}
    per_column = {
        name: column_quality(column_values(current, name), kind, allowed.get(name), n)
        for name, kind in columns.items()
    }
    return quality_result(
        per_column, n, max_missing_share=max_missing_share, max_out_of_schema_share=max_out_of_schema_share
    )


def quality_result(
    per_column: dict[str, dict[str, Any]],
    n: int,
    *,
    max_missing_share: float = MAX_MISSING_SHARE,
    max_out_of_schema_share: float = MAX_OUT_OF_SCHEMA_SHARE,
) -> dict[str, Any]:
    """A window's data quality from its columns' (``column_quality``, in column order)."""
    reasons = [] if n >= MIN_ROWS else ["window holds no rows"]
    for name, quality in per_column.items():
        reasons += _reasons(name, quality, max_missing_share, max_out_of_schema_share)
    thresholds = {
        "max_missing_share": max_missing_share,
        "max_out_of_schema_share": max_out_of_schema_share,
    }
    return {
        "n_rows": n,
        "columns": per_column,
        "broken_feed": bool(reasons),
        "reasons": reasons,
        "thresholds": thresholds,
    }
