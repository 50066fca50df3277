"""Drift of the values a feature type derives from a column (a text's length, its share of
out-of-vocabulary words, ...), stored beside the column's own decision as
``drift["descriptors"][column][descriptor]``: each entry has the shape of a drift column, so the
heat map shows it as the feature's sub-row. They do not count in the drift share."""

from __future__ import annotations

from workers.drift.columns import Columns, column_values
from workers.drift.engine import ColumnDrift, ColumnDriftDict, _json_float
from workers.drift.summary import ReferenceSummary
from workers.features.base import DriftScore
from workers.features.registry import ColumnType, feature_type


def _entry(column_type: str, scored: DriftScore | None, n_reference: int) -> ColumnDrift:
    if scored is None:
        note = "no value on one side: not tested"
        return ColumnDrift(column_type, None, None, None, None, False, n_reference, 0, note)
    test = scored.test
    threshold = test.threshold if scored.threshold is None else scored.threshold
    return ColumnDrift(
        column_type,
        test.name,
        test.display_name,
        _json_float(scored.score),
        threshold,
        test.drifted(scored.score, threshold),
        n_reference,
        scored.n_current,
        higher_is_drift=test.higher_is_drift,
    )


def descriptor_drift(
    reference: ReferenceSummary, current: Columns, columns: dict[str, ColumnType]
) -> dict[str, dict[str, ColumnDriftDict]]:
    """Per column whose type derives descriptors, each descriptor's drift entry (others: absent)."""
    out: dict[str, dict[str, ColumnDriftDict]] = {}
    for name, kind_name in columns.items():
        summary = reference.column(name)
        scores = feature_type(kind_name).descriptor_drift(summary, column_values(current, name))
        if scores:
            out[name] = {d: _entry("numerical", s, summary.n).to_dict() for d, s in scores.items()}
    return out
