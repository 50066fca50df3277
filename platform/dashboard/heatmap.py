"""The drift heat map: one cell per feature (and the prediction) per check, coloured by how far
its score is towards its threshold.

Which way a score drifts is read from the column itself (``higher_is_drift``, stored by the
drift engine with every score): nothing here knows which tests are p-values.
"""

import math
from collections.abc import Mapping
from typing import Any

from dashboard.numbers import finite, fixed
from dashboard.selectors import checks_recent
from dashboard.timerange import TimeRange
from monitoring.models import QualityCheck
from registry.models import RegisteredModel

HEATMAP_CHECKS = 30
PREDICTION_ROW = "prediction"
MULTIVARIATE_ROW = "all features (multivariate)"
NOT_MEASURED = "#eceef2"


def _is_p_value(column: Mapping[str, Any]) -> bool:
    """A p-value drifts below its threshold; a distance or an error above it (the default)."""
    return column.get("higher_is_drift") is False


def drift_ratio(column: Mapping[str, Any]) -> float | None:
    """How far a score is towards its threshold: 1.0 is the threshold, above it drift."""
    score, threshold = finite(column.get("score")), finite(column.get("threshold"))
    if score is None or threshold is None or threshold <= 0:
        return None
    if _is_p_value(column):  # the smaller, the further past the threshold
        return min(threshold / max(score, 1e-12), 1e3)
    return min(score / threshold, 1e3)


def drift_colour(ratio: float | None, drifted: bool) -> str:
    if ratio is None:
        return NOT_MEASURED
    if drifted or ratio >= 1:
        # Red deepens with each tenfold past the threshold.
        depth = min(math.log10(max(ratio, 1.0)) / 2, 1.0)
        return f"hsl({int(20 - 20 * depth)}, 80%, {int(68 - 23 * depth)}%)"
    return f"hsl({int(140 - 90 * ratio)}, 60%, {int(88 - 10 * ratio)}%)"


def _cell_title(column: Mapping[str, Any], drifted: bool) -> str:
    score, threshold = finite(column.get("score")), finite(column.get("threshold"))
    rule = "p-value below threshold = drift" if _is_p_value(column) else "score above threshold = drift"
    return (
        f"{column.get('method_display') or column.get('method') or 'not tested'} · "
        f"score {fixed(score, 4)} · threshold {fixed(threshold, 4)} ({rule})"
        f"{' · DRIFTED' if drifted else ''}{' · ' + column['note'] if column.get('note') else ''}"
    )


def drift_cell(column: Mapping[str, Any] | None) -> dict[str, Any]:
    """Colour, drift flag and hover text of one stored drift column (``{}``/None: not measured)."""
    if not column:
        return {"colour": drift_colour(None, False), "drifted": False, "title": "not measured"}
    drifted = bool(column.get("drifted"))
    return {
        "colour": drift_colour(drift_ratio(column), drifted),
        "drifted": drifted,
        "title": _cell_title(column, drifted),
    }


def _feature_names(model: RegisteredModel, checks: list[QualityCheck]) -> list[str]:
    """The schema's features in order, then any other column a check measured."""
    names = [f["name"] for f in model.features or []]
    seen = {n for c in checks for n in (c.drift or {}).get("columns", {})}
    return names + sorted(seen - set(names))


def _column_head(check: QualityCheck) -> dict[str, Any]:
    drift = check.drift or {}
    return {
        "id": check.pk,
        "label": check.window_end.strftime("%Y-%m-%d %H:%M"),
        "share": finite(drift.get("share")),
        "dataset_drift": bool(drift.get("dataset_drift")),
    }


def _descriptor_rows(feature: str, checks: list[QualityCheck]) -> list[dict[str, Any]]:
    """The feature's sub-rows: one per descriptor a check stored for it (text features)."""
    stored = [(c.drift or {}).get("descriptors", {}).get(feature, {}) for c in checks]
    names = sorted({d for entries in stored for d in entries})  # JSONB keeps no key order
    return [
        {
            "name": f"{feature} · {d}",
            "feature": feature,
            "is_descriptor": True,
            "cells": [{**drift_cell(e.get(d)), "check": c.pk} for c, e in zip(checks, stored, strict=True)],
        }
        for d in names
    ]


def drift_heatmap(*, model: RegisteredModel, trange: TimeRange | None = None) -> dict[str, Any] | None:
    """Rows: features then the prediction; columns: the latest checks in the range, oldest first."""
    checks = checks_recent(model=model, limit=HEATMAP_CHECKS, done_only=True, trange=trange)
    checks = [c for c in checks if c.drift or c.prediction_drift]
    if not checks:
        return None
    # Each cell names its check: a click opens that feature's drill-down at that check.
    rows: list[dict[str, Any]] = []
    for n in _feature_names(model, checks):
        cells = [{**drift_cell((c.drift or {}).get("columns", {}).get(n)), "check": c.pk} for c in checks]
        rows.append({"name": n, "feature": n, "cells": cells})
        rows.extend(_descriptor_rows(n, checks))
    if any((c.drift or {}).get("multivariate") for c in checks):
        cells = [drift_cell((c.drift or {}).get("multivariate")) for c in checks]
        rows.append(
            {"name": MULTIVARIATE_ROW, "is_prediction": True, "is_multivariate": True, "cells": cells}
        )
    prediction = [{**drift_cell(c.prediction_drift or None), "check": c.pk} for c in checks]
    rows.append({"name": PREDICTION_ROW, "is_prediction": True, "cells": prediction})
    return {"columns": [_column_head(c) for c in checks], "rows": rows}


def drift_rows(*, check: QualityCheck) -> list[dict[str, Any]]:
    """The check page's per-feature drift table: each stored column with its cell."""
    columns = (check.drift or {}).get("columns", {})
    return [{"name": n, **c, "cell": drift_cell(c)} for n, c in columns.items()]
