"""Data-quality signals of a window, so a broken feed is not mistaken for drift.

A window flagged ``broken_feed`` should still be stored and alerted on, but its drift is
suspect and its rows must never be used for retraining.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import pandas as pd

from workers.drift.summary import ColumnType, _check_columns

# Thresholds (documented defaults; callers may pass a MonitoringPolicy's values instead):
MAX_MISSING_SHARE = 0.2  # a feature more than 20% missing (NaN, None, ±inf, unparsable) is broken
MAX_OUT_OF_SCHEMA_SHARE = 0.05  # more than 5% of a feature's values never seen in the schema
MIN_ROWS = 1  # an empty window is broken by definition
_EXAMPLES = 5  # out-of-schema values reported per column


def _numerical_missing(series: pd.Series) -> np.ndarray:
    # Unparsable strings count as missing too: a feed sending "n/a" in a number is broken.
    values = pd.to_numeric(series, errors="coerce").to_numpy(dtype="float64", na_value=np.nan)
    return ~np.isfinite(values)


def _categorical_missing(series: pd.Series) -> np.ndarray:
    return (series.isna() | series.isin([np.inf, -np.inf])).to_numpy()


def _out_of_schema(series: pd.Series, missing: np.ndarray, allowed: Iterable[Any]) -> tuple[int, list[Any]]:
    present = series[~missing]
    outside = ~present.isin(list(allowed))
    examples = pd.unique(present[outside])[:_EXAMPLES]
    return int(outside.sum()), [v.item() if isinstance(v, np.generic) else v for v in examples]


def _column_quality(
    series: pd.Series, kind: ColumnType, allowed: Iterable[Any] | None, n: int
) -> dict[str, Any]:
    missing = _numerical_missing(series) if kind == "numerical" else _categorical_missing(series)
    n_missing = int(missing.sum())
    out: dict[str, Any] = {
        "missing_count": n_missing,
        "missing_share": n_missing / n if n else None,
    }
    if kind == "categorical" and allowed is not None:
        count, examples = _out_of_schema(series, missing, allowed)
        out |= {"out_of_schema_count": count, "out_of_schema_share": count / n if n else None}
        out["out_of_schema_examples"] = examples
    return out


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
    current: pd.DataFrame,
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
    n = int(len(current))
    allowed = categories or {}
    per_column = {
        name: _column_quality(current[name], kind, allowed.get(name), n) for name, kind in columns.items()
    }
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
