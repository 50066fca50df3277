"""Per-feature drift: a heat-map cell's page (score over time, reference vs window, effect size)."""

from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBadRequest
from django.shortcuts import render
from django.utils.html import escape

from dashboard import feature_drift, selectors
from dashboard.heatmap import PREDICTION_ROW
from dashboard.timerange import PRESET_LABELS, time_range_parse
from monitoring import selectors as monitoring_selectors
from monitoring.models import QualityCheck
from registry.models import RegisteredModel
from registry.reference import PREDICTION
from registry.selectors import model_get
from workers.drift.result import drift_read
from workers.features import feature_type

SERIES_CHECKS = 500  # the newest checks in the range drawn as points
TABLE_CHECKS = 50
RANGE_PARAMS = ("range", "start", "end")  # kept by every link on the page


def drift_columns(model: RegisteredModel) -> list[str]:
    """The heat map's rows: the schema's features, any other column the newest check measured, and
    the prediction."""
    newest = monitoring_selectors.latest_done_check(model=model)
    measured = list(drift_read(newest.drift).columns) if newest is not None else []
    schema = [f["name"] for f in model.features or []]
    return schema + [n for n in measured if n not in schema] + [PREDICTION_ROW]


@login_required
def feature_drift_page(request: HttpRequest, name: str) -> HttpResponse:
    model = model_get(name=name)
    column = request.GET.get("feature", "")
    if column not in drift_columns(model):
        raise Http404(f"model {model.name!r} has no feature {column!r}")
    raw_check = request.GET.get("check", "")
    if raw_check and not raw_check.isdigit():
        # Plain text, escaped too: a request value never reaches a page as markup.
        return HttpResponseBadRequest(
            f"check: {escape(repr(raw_check))} is not a check id", content_type="text/plain; charset=utf-8"
        )
    trange = time_range_parse(request.GET, newest=selectors.newest_check_end(model=model))
    if trange.error:
        messages.warning(request, f"{trange.error}: showing the {trange.label}.")
    stored = PREDICTION if column == PREDICTION_ROW else column  # the name checks store it under
    points = monitoring_selectors.column_drift_series(
        model=model, column=stored, start=trange.start, end=trange.end, limit=SERIES_CHECKS
    )
    effects = monitoring_selectors.column_effects(
        model=model, column=stored, check_ids=[p["id"] for p in points]
    )
    check = _selected_check(model, int(raw_check) if raw_check else None, points)
    query = urlencode({"feature": column, **{k: v for k in RANGE_PARAMS if (v := request.GET.get(k))}})
    context = {
        "model": model,
        "column": column,
        "column_type": model.feature_types.get(column, "prediction"),
        "trange": trange,
        "presets": PRESET_LABELS,
        "query": query,
        "chart": feature_drift.score_chart(points, effects, query),
        "rows": [{**p, "psi": effects.get(p["id"])} for p in reversed(points)][:TABLE_CHECKS],
        "check": check,
        **(_distribution_context(check, stored) if check else {}),
    }
    return render(request, "dashboard/feature_drift.html", context)


def _distribution_context(check: QualityCheck, stored: str) -> dict[str, Any]:
    row = monitoring_selectors.check_distribution_get(check=check, column=stored)
    distribution = row.payload if row is not None else None
    return {
        "check_column": monitoring_selectors.check_column_drift(check=check, column=stored),
        "distribution": distribution,
        # What the bars leave unsaid, in the column's type's words (numerical: the tails).
        "distribution_note": _distribution_note(distribution) if distribution else None,
        "histogram": feature_drift.histogram(distribution) if distribution else None,
        "scatter": feature_drift.scatter(distribution) if distribution else None,
        "effects": feature_drift.effect_rows(distribution) if distribution else [],
    }


def _distribution_note(distribution: dict[str, Any]) -> str | None:
    """What the bars leave unsaid: the type's words (numerical: the tails), and for a very large
    window, that its bars are a sample's."""
    notes = [feature_type(distribution["column_type"]).distribution_note]
    if sample := distribution.get("sample"):
        notes.append(
            f"window's bars from a uniform sample of {sample['rows']:,} of its {sample['of']:,} values"
        )
    return "; ".join(n for n in notes if n) or None


def _selected_check(
    model: RegisteredModel, check_id: int | None, points: list[dict[str, Any]]
) -> QualityCheck | None:
    """The check asked for (it must be this model's), else the newest one drawn."""
    if check_id is None:
        return monitoring_selectors.check_get(check_id=points[-1]["id"]) if points else None
    check = monitoring_selectors.check_get(check_id=check_id)
    if check.model_id != model.pk:
        raise Http404(f"check #{check_id} is not a check of {model.name!r}")
    return check
