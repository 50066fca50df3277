"""The drift heat map: one cell per feature (and the prediction) per check, coloured by how far
its score is towards its threshold.

Which way a score drifts is read from the column itself (``higher_is_drift``, stored by the
drift engine with every score): nothing here knows which tests are p-values.
"""

import math
from dataclasses import asdict
from typing import Any
from urllib.parse import quote

from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from dashboard.numbers import fixed
from dashboard.selectors import checks_recent
from dashboard.timerange import TimeRange
from monitoring.models import QualityCheck
from monitoring.segment_rules import segment_entries
from registry.models import RegisteredModel
from workers.drift.result import StoredDrift, StoredScore, drift_read, score_read

HEATMAP_CHECKS = 30
PREDICTION_ROW = "prediction"
MULTIVARIATE_ROW = "all features (multivariate)"
NOT_MEASURED = "#eceef2"


def drift_ratio(column: StoredScore) -> float | None:
    """How far a score is towards its threshold: 1.0 is the threshold, above it drift."""
    score, threshold = column.score, column.threshold
    if score is None or threshold is None or threshold <= 0:
        return None
    if column.is_p_value:  # the smaller, the further past the threshold
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


def _cell_title(column: StoredScore) -> str:
    rule = "p-value below threshold = drift" if column.is_p_value else "score above threshold = drift"
    return (
        f"{column.method_display or column.method or 'not tested'} · "
        f"score {fixed(column.score, 4)} · threshold {fixed(column.threshold, 4)} ({rule})"
        f"{' · DRIFTED' if column.drifted else ''}{' · ' + column.note if column.note else ''}"
    )


def drift_cell(column: StoredScore | None) -> dict[str, Any]:
    """Colour, drift flag and hover text of one stored drift score (None: not measured)."""
    if column is None:
        return {"colour": drift_colour(None, False), "drifted": False, "title": "not measured"}
    return {
        "colour": drift_colour(drift_ratio(column), column.drifted),
        "drifted": column.drifted,
        "title": _cell_title(column),
    }


def _feature_names(model: RegisteredModel, drifts: list[StoredDrift]) -> list[str]:
    """The schema's features in order, then any other column a check measured."""
    names = [f["name"] for f in model.features or []]
    seen = {n for d in drifts for n in d.columns}
    return names + sorted(seen - set(names))


def _column_head(check: QualityCheck, drift: StoredDrift) -> dict[str, Any]:
    return {
        "id": check.pk,
        "label": check.window_end.strftime("%Y-%m-%d %H:%M"),
        "share": drift.share,
        "dataset_drift": bool(drift.dataset_drift),
    }


def _descriptor_rows(
    feature: str, checks: list[QualityCheck], drifts: list[StoredDrift]
) -> list[dict[str, Any]]:
    """The feature's sub-rows: one per descriptor a check stored for it (text features)."""
    stored = [d.descriptors[feature] if feature in d.descriptors else {} for d in drifts]
    names = sorted({d for entries in stored for d in entries})  # JSONB keeps no key order
    return [
        {
            "name": f"{feature} · {d}",
            "feature": feature,
            "is_descriptor": True,
            "cells": [
                {**drift_cell(e[d] if d in e else None), "check": c.pk}
                for c, e in zip(checks, stored, strict=True)
            ],
        }
        for d in names
    ]


def _measured(check: QualityCheck, segment: str) -> tuple[object, object]:
    """The check's (drift, prediction drift): the whole model's, or one segment's."""
    if not segment:
        return check.drift, check.prediction_drift
    entry = segment_entries(check.segments).get(segment) or {}
    return entry.get("drift"), entry.get("prediction_drift")


def _drill_link(model: RegisteredModel, trange: TimeRange | None) -> str:
    """The drill-down's address up to ``feature=``, keeping the page's time range."""
    query = "&range=" + (trange.key if trange else "")
    if trange is not None and trange.key == "custom":
        query += f"&start={trange.start_input}&end={trange.end_input}"
    return reverse("dashboard:feature-drift", args=[model.name]) + "?feature={}" + query


def _cells_html(row: dict[str, Any], link: str) -> SafeString:
    """One row's cells as HTML, built here rather than in the template: 150 cells of a dozen
    template lookups each were half the model page's render time."""
    name = row["name"]
    if row.get("is_multivariate"):
        inner = ["●" if c["drifted"] else "" for c in row["cells"]]
    else:
        href = link.format(quote(row.get("feature") or name, safe="/"))
        inner = [
            format_html(
                '<a href="{}&amp;check={}#distribution" aria-label="{} in check #{}">{}</a>',
                href,
                c["check"],
                name,
                c["check"],
                "●" if c["drifted"] else "",
            )
            for c in row["cells"]
        ]
    return format_html_join(
        "",
        '<td class="cell{}" style="background: {}" title="{} · {}">{}</td>',
        (
            (" drifted" if c["drifted"] else "", c["colour"], name, c["title"], html)
            for c, html in zip(row["cells"], inner, strict=True)
        ),
    )


def drift_heatmap(
    *, model: RegisteredModel, trange: TimeRange | None = None, segment: str = ""
) -> dict[str, Any] | None:
    """Rows: features then the prediction; columns: the latest checks in the range, oldest first.
    With ``segment`` (``country=DE``), each check's drift in that segment."""
    recent = checks_recent(model=model, limit=HEATMAP_CHECKS, done_only=True, trange=trange)
    measured = [(c, _measured(c, segment)) for c in recent]
    measured = [(c, m) for c, m in measured if m[0] or m[1]]
    if not measured:
        return None
    checks = [c for c, _ in measured]
    drifts = [drift_read(m[0]) for _, m in measured]
    # Each cell names its check: a click opens that feature's drill-down at that check.
    rows: list[dict[str, Any]] = []
    for n in _feature_names(model, drifts):
        cells = [
            {**drift_cell(d.columns[n] if n in d.columns else None), "check": c.pk}
            for c, d in zip(checks, drifts, strict=True)
        ]
        rows.append({"name": n, "feature": n, "cells": cells})
        rows.extend(_descriptor_rows(n, checks, drifts))
    if any(d.multivariate for d in drifts):
        cells = [drift_cell(d.multivariate) for d in drifts]
        rows.append(
            {"name": MULTIVARIATE_ROW, "is_prediction": True, "is_multivariate": True, "cells": cells}
        )
    prediction = [{**drift_cell(score_read(m[1])), "check": c.pk} for c, m in measured]
    rows.append({"name": PREDICTION_ROW, "is_prediction": True, "cells": prediction})
    link = _drill_link(model, trange)
    for row in rows:
        row["cells_html"] = _cells_html(row, link)
    return {"columns": [_column_head(c, d) for c, d in zip(checks, drifts, strict=True)], "rows": rows}


def drift_rows(*, check: QualityCheck) -> list[dict[str, Any]]:
    """The check page's per-feature drift table: each stored column with its cell."""
    columns = drift_read(check.drift).columns
    return [{"name": n, **asdict(c), "cell": drift_cell(c)} for n, c in columns.items()]
