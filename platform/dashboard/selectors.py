"""Reads for the dashboard: shape stored checks and alerts into what the pages draw.

Any JSON part of a check may be ``{}`` (too little data): every helper here tolerates that.
"""

import math
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Case, Count, Exists, IntegerField, OuterRef, Q, QuerySet, Subquery, Value, When
from django.db.models.functions import Coalesce
from django.http import Http404
from django.utils.safestring import mark_safe

from dashboard.charts import HLine, Marker, Series, chart_svg, line_chart
from dashboard.timerange import TimeRange
from monitoring.models import (
    Alert,
    AlertKind,
    AlertState,
    CheckState,
    GroundTruth,
    MonitoringPolicy,
    PredictionSample,
    QualityCheck,
)
from registry.models import ModelVersion, ReferenceDataset, RegisteredModel, VersionStatus
from retraining.models import ACTIVE_STATES, RetrainJob
from workers.drift.stats import STATTESTS

CHART_CHECKS = 400  # points drawn at most; a longer range is thinned evenly
CHART_LIMIT = 5000  # check rows read at most for one chart
MARKERS = 200  # of each kind
HEATMAP_CHECKS = 30
LIVE_STATES = (AlertState.OPEN, AlertState.ACKNOWLEDGED)
DRIFT_KINDS = [k for k in ("data_drift", "prediction_drift", "multivariate_drift") if k in AlertKind.values]
TABLE_CHECKS = 50
PREDICTION_ROW = "prediction"
MULTIVARIATE_ROW = "all features (multivariate)"
DECISION_LABELS = {  # kind: (label, short label for tables)
    AlertKind.ACCURACY_DROP: ("accuracy drop", "acc"),
    AlertKind.ESTIMATED_ACCURACY_DROP: ("estimated accuracy drop", "est"),
    AlertKind.DATA_QUALITY: ("broken feed", "dq"),
    AlertKind.DATA_DRIFT: ("data drift", "drift"),
    AlertKind.MULTIVARIATE_DRIFT: ("multivariate drift", "mv"),
    AlertKind.PREDICTION_DRIFT: ("prediction drift", "pred"),
}


def _num(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _pair(value: Any) -> tuple[float, float] | None:
    if isinstance(value, list | tuple) and len(value) == 2:
        lo, hi = _num(value[0]), _num(value[1])
        if lo is not None and hi is not None:
            return (lo, hi)
    return None


# --- models ---------------------------------------------------------------------------------


def policy_get(*, model: RegisteredModel) -> MonitoringPolicy:
    """The stored policy, or an unsaved default one: a read never writes."""
    return MonitoringPolicy.objects.filter(model=model).first() or MonitoringPolicy(model=model)


def _count(queryset: QuerySet[Any]) -> Subquery:
    return Subquery(
        queryset.filter(model=OuterRef("pk")).order_by().values("model").annotate(c=Count("pk")).values("c"),
        output_field=IntegerField(),
    )


def model_rows(*, name: str | None = None) -> list[dict[str, Any]]:
    """One row per model for the home page: status, champion, latest check, sparkline, live alerts.

    Read from check and alert rows only: never a count over the raw samples, which grow without
    bound (the latest check carries the window's sample and label counts)."""
    queryset = RegisteredModel.objects.filter(name=name) if name else RegisteredModel.objects.all()
    models = queryset.order_by("name").annotate(
        n_open=_count(Alert.objects.filter(state=AlertState.OPEN)),
        n_acknowledged=_count(Alert.objects.filter(state=AlertState.ACKNOWLEDGED)),
        n_drift_alerts=_count(Alert.objects.filter(state__in=LIVE_STATES, kind__in=DRIFT_KINDS)),
        n_active_jobs=_count(RetrainJob.objects.filter(state__in=ACTIVE_STATES)),
        champion=Subquery(
            ModelVersion.objects.filter(model=OuterRef("pk"), status=VersionStatus.CHAMPION).values(
                "version"
            )[:1]
        ),
    )
    return [_model_row(m) for m in models]


SPARK_W, SPARK_H, SPARK_CHECKS = 120, 28, 20


def sparkline(values: list[float | None]) -> str:
    """SVG polyline points for the finite values, oldest left; empty when fewer than two."""
    points = [(i, v) for i, v in enumerate(values) if v is not None]
    if len(points) < 2:
        return ""
    lo, hi = min(v for _, v in points), max(v for _, v in points)
    span = (hi - lo) or 1.0
    last = max(len(values) - 1, 1)
    return " ".join(
        f"{2 + (SPARK_W - 4) * i / last:.1f},{2 + (SPARK_H - 4) * (1 - (v - lo) / span):.1f}"
        for i, v in points
    )


def model_status(
    *, latest: QualityCheck | None, open_alerts: int, drift_alerts: int, active_jobs: int
) -> str:
    """retraining > drifting > warning > healthy; "no data" before the first check."""
    if active_jobs:
        return "retraining"
    decisions = (latest.decisions or {}) if latest else {}
    if drift_alerts or (latest and (latest.drift or {}).get("dataset_drift")):
        return "drifting"
    if open_alerts or any(v is True for k, v in decisions.items() if k in DECISION_LABELS):
        return "warning"
    return "healthy" if latest else "no data"


def _model_row(model: RegisteredModel) -> dict[str, Any]:
    policy = policy_get(model=model)
    recent = list(
        QualityCheck.objects.filter(model=model, state=CheckState.DONE).order_by("-window_end", "-pk")[
            :SPARK_CHECKS
        ]
    )
    latest = recent[0] if recent else None
    # The newest window may have no labels yet: the last realised value is then the one to show.
    realised = next((c for c in recent if _num((c.metrics or {}).get(policy.metric)) is not None), None)
    open_alerts = model.n_open or 0  # type: ignore[attr-defined]
    acknowledged = model.n_acknowledged or 0  # type: ignore[attr-defined]
    return {
        "name": model.name,
        "task": model.task,
        "n_features": len(model.features or []),
        "champion": model.champion,  # type: ignore[attr-defined]
        "status": model_status(
            latest=latest,
            open_alerts=open_alerts + acknowledged,
            drift_alerts=model.n_drift_alerts or 0,  # type: ignore[attr-defined]
            active_jobs=model.n_active_jobs or 0,  # type: ignore[attr-defined]
        ),
        "open_alerts": open_alerts,
        "acknowledged_alerts": acknowledged,
        "latest": check_row(check=latest, metric=policy.metric) if latest else None,
        "realised": check_row(check=realised, metric=policy.metric) if realised else None,
        # The latest window has no labels yet, so the page shows the last realised value, marked *.
        "realised_fallback": bool(
            latest and realised and _num((latest.metrics or {}).get(policy.metric)) is None
        ),
        "spark_realised": sparkline([_num((c.metrics or {}).get(policy.metric)) for c in reversed(recent)]),
        "spark_estimated": sparkline([_num((c.estimated or {}).get("value")) for c in reversed(recent)]),
    }


HOME_STATUSES = ("healthy", "warning", "drifting", "retraining", "no data")


def model_rows_filtered(*, query: str = "", status: str = "") -> list[dict[str, Any]]:
    """The home page's rows, narrowed by a name search and a status."""
    rows = model_rows()
    if query:
        rows = [r for r in rows if query.lower() in r["name"].lower()]
    if status in HOME_STATUSES:
        rows = [r for r in rows if r["status"] == status]
    return rows


def reference_get(*, model: RegisteredModel) -> ReferenceDataset | None:
    return ReferenceDataset.objects.filter(model=model, is_active=True).order_by("-pk").first()


def baseline_text(*, policy: MonitoringPolicy, reference: ReferenceDataset | None) -> str:
    """Where the baseline comes from, as the checks compute it (monitoring.checks)."""
    if policy.baseline is not None:
        return f"{policy.baseline:.4f} (set in the policy)"
    value = _num((reference.baseline_metrics or {}).get(policy.metric)) if reference else None
    if value is not None:
        return f"{value:.4f} (the model's {policy.metric} on its reference rows)"
    if reference is None:
        return "none: no reference dataset"
    return "none: the reference rows carry no predictions"


def policy_rows(
    *, policy: MonitoringPolicy, reference: ReferenceDataset | None = None
) -> list[tuple[str, Any]]:
    unit = {"samples": "samples", "labelled": "labelled samples"}.get(policy.window_kind, "hours")
    window = f"last {policy.window_size} {unit}"
    return [
        ("enabled", policy.enabled),
        ("window", window),
        ("check every", f"{policy.check_every_minutes} min"),
        ("min samples / labels", f"{policy.min_samples} / {policy.min_labels}"),
        ("metric", policy.metric),
        ("baseline", baseline_text(policy=policy, reference=reference)),
        ("tolerance", policy.tolerance),
        ("dataset drift at share", policy.drift_share),
        ("alert when", f"{policy.alert_k} of last {policy.alert_n} checks breach"),
        ("cooldown", f"{policy.cooldown_minutes} min"),
        ("auto retrain", policy.auto_retrain),
        ("notify", ", ".join(policy.emails() + ([policy.webhook_url] if policy.webhook_url else [])) or "—"),
        ("next check", policy.next_check_at),
    ]


def versions_list(*, model: RegisteredModel) -> QuerySet[ModelVersion]:
    return ModelVersion.objects.filter(model=model).select_related("parent").order_by("-version")


# --- checks ---------------------------------------------------------------------------------


# What a chart never reads: left in the database when a long range loads thousands of rows.
HEAVY_COLUMNS = ("drift", "prediction_drift", "data_quality", "labels", "error", "report")


def checks_recent(
    *,
    model: RegisteredModel,
    limit: int,
    done_only: bool = False,
    trange: TimeRange | None = None,
    light: bool = False,
) -> list[QualityCheck]:
    """The latest ``limit`` checks (inside the range, if given), oldest first (the order charts
    read in). ``light`` leaves the drift, data-quality and label JSON unloaded."""
    queryset = QualityCheck.objects.filter(model=model)
    queryset = queryset.defer(*HEAVY_COLUMNS) if light else queryset.select_related("version")
    if done_only:
        queryset = queryset.filter(state=CheckState.DONE)
    if trange is not None and trange.start is not None:
        queryset = queryset.filter(window_end__gt=trange.start)
    if trange is not None and trange.end is not None:
        queryset = queryset.filter(window_end__lt=trange.end)
    return list(reversed(queryset.order_by("-window_end", "-pk")[:limit]))


def newest_labelled_time(*, model: RegisteredModel) -> datetime | None:
    """Just after the newest prediction that has its label (walks the time index backwards)."""
    labelled = GroundTruth.objects.filter(model=model, sample_id=OuterRef("sample_id"))
    newest = (
        PredictionSample.objects.filter(model=model)
        .filter(Exists(labelled))
        .order_by("-timestamp")
        .values_list("timestamp", flat=True)
        .first()
    )
    return newest + timedelta(microseconds=1) if newest else None


def check_for_window(*, model: RegisteredModel, spec: str, end: datetime) -> QualityCheck | None:
    return QualityCheck.objects.filter(model=model, window_spec=spec, window_end=end).first()


def newest_check_end(*, model: RegisteredModel) -> datetime | None:
    return (
        QualityCheck.objects.filter(model=model)
        .order_by("-window_end")
        .values_list("window_end", flat=True)
        .first()
    )


def _chart_checks(*, model: RegisteredModel, trange: TimeRange | None) -> list[QualityCheck]:
    """The finished checks a chart draws, oldest first: ids first (cheap), thinned to
    CHART_CHECKS, then only those rows, without their drift and label JSON."""
    queryset = QualityCheck.objects.filter(model=model, state=CheckState.DONE)
    if trange is not None and trange.start is not None:
        queryset = queryset.filter(window_end__gt=trange.start)
    if trange is not None and trange.end is not None:
        queryset = queryset.filter(window_end__lt=trange.end)
    ids = list(queryset.order_by("-window_end", "-pk").values_list("pk", flat=True)[:CHART_LIMIT])
    if len(ids) > CHART_CHECKS:
        ids = ids[:: math.ceil(len(ids) / CHART_CHECKS)]  # newest first: the newest is always kept
    rows = QualityCheck.objects.filter(pk__in=ids).defer(*HEAVY_COLUMNS)
    return list(rows.order_by("window_end", "pk"))


def check_get(*, check_id: int) -> QualityCheck:
    check = QualityCheck.objects.select_related("model", "version").filter(pk=check_id).first()
    if check is None:
        raise Http404(f"no check {check_id}")
    return check


def check_has_report(*, check: QualityCheck) -> bool:
    name = check.report.name
    return check.report.storage.exists(name) if name else False


def decision_badges(decisions: dict[str, Any]) -> list[dict[str, str]]:
    """True: breach, False: fine, None: not enough data to decide."""
    badges = []
    for key, (label, short) in DECISION_LABELS.items():
        value = decisions.get(key)
        css = "bad" if value is True else "ok" if value is False else "na"
        verdict = "breach" if value is True else "fine" if value is False else "not enough data to decide"
        badges.append(
            {"key": key, "label": label, "short": short, "css": css, "title": f"{label}: {verdict}"}
        )
    return badges


def check_row(*, check: QualityCheck, metric: str) -> dict[str, Any]:
    """The numbers one check contributes to a table row."""
    metrics, estimated, labels = check.metrics or {}, check.estimated or {}, check.labels or {}
    return {
        "id": check.pk,
        "check": check,
        "state": check.state,
        "metric": metric,
        "value": _num(metrics.get(metric)),
        "ci": _pair(metrics.get(f"{metric}_ci")),
        "accuracy": _num(metrics.get("accuracy")),
        "estimated": _num(estimated.get("value")),
        "estimated_ci": _pair(estimated.get("ci")),
        "estimate_error": _num(estimated.get("error")),
        "coverage": _num(labels.get("label_coverage")),
        "drift_share": _num((check.drift or {}).get("share")),
        "dataset_drift": (check.drift or {}).get("dataset_drift"),
        "badges": decision_badges(check.decisions or {}),
    }


def _chart_row(check: QualityCheck, metric: str) -> dict[str, Any]:
    """check_row's numbers the chart draws, reading only the columns a light fetch loads."""
    metrics, estimated = check.metrics or {}, check.estimated or {}
    return {
        "value": _num(metrics.get(metric)),
        "ci": _pair(metrics.get(f"{metric}_ci")),
        "accuracy": _num(metrics.get("accuracy")),
        "estimated": _num(estimated.get("value")),
        "estimated_ci": _pair(estimated.get("ci")),
        "estimate_error": _num(estimated.get("error")),
    }


def check_rows(
    *, model: RegisteredModel, metric: str, limit: int = TABLE_CHECKS, trange: TimeRange | None = None
) -> list[dict[str, Any]]:
    checks = checks_recent(model=model, limit=limit, trange=trange)
    return [check_row(check=c, metric=metric) for c in reversed(checks)]


def _fmt(value: float | None, digits: int = 3) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def _ci_text(ci: tuple[float, float] | None) -> str:
    return f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else ""


def quality_chart(
    *, model: RegisteredModel, policy: MonitoringPolicy, trange: TimeRange | None = None
) -> dict[str, Any] | None:
    """Realised metric with its CI band, the CBPE estimate beside it, baseline and tolerance lines,
    per-version lines, and markers for breaches, alerts, retrain jobs and promotions, on a real
    time axis (each check at its window's end). None when nothing has a value yet."""
    checks = _chart_checks(model=model, trange=trange)
    if not checks:
        return None
    metric = policy.metric
    rows = [_chart_row(c, metric) for c in checks]
    labels = [c.window_end.strftime("%Y-%m-%d %H:%M") for c in checks]
    series = [
        Series(
            f"{metric} (realised)",
            "s-realised",
            [r["value"] for r in rows],
            band=[r["ci"] for r in rows],
            titles=[
                f"{lab} · {metric} {_fmt(r['value'])}{_ci_text(r['ci'])} · n={c.n_labelled}"
                for lab, r, c in zip(labels, rows, checks, strict=True)
            ],
        )
    ]
    if model.is_classification:
        if metric != "accuracy":
            series.append(Series("accuracy (realised)", "s-accuracy", [r["accuracy"] for r in rows]))
        series.append(
            Series(
                "estimated accuracy (CBPE)",
                "s-estimated",
                [r["estimated"] for r in rows],
                band=[r["estimated_ci"] for r in rows],
                titles=[
                    f"{lab} · estimated {_fmt(r['estimated'])}{_ci_text(r['estimated_ci'])}"
                    + (f" · error {r['estimate_error']:+.3f}" if r["estimate_error"] is not None else "")
                    for lab, r in zip(labels, rows, strict=True)
                ],
            )
        )
    series += _version_series(checks, metric)
    hlines = _reference_lines(checks[-1], policy)
    bounded = metric in ("accuracy", "f1_macro", "precision_macro", "recall_macro", "roc_auc")
    # A custom range is drawn whole; a preset spans the checks inside it (two checks an hour
    # apart would otherwise sit in the last pixels of a week).
    x_range = None
    if trange is not None and trange.key == "custom" and trange.start is not None and trange.end is not None:
        x_range = (trange.start.timestamp(), trange.end.timestamp())
    chart = line_chart(
        times=[c.window_end.timestamp() for c in checks],
        series=series,
        hlines=hlines,
        clamp=(0.0, 1.0) if bounded else None,
        y_label=metric,
        x_range=x_range,
        markers=_breach_markers(checks) + chart_markers(model=model, trange=trange),
    )
    if chart is not None:
        chart["metric"] = metric
        chart["svg"] = mark_safe(chart_svg(chart))  # noqa: S308 (every value is escaped in chart_svg)
    return chart


def _breach_markers(checks: list[QualityCheck]) -> list[Marker]:
    markers = []
    for c in checks:
        kinds = [DECISION_LABELS[k][0] for k in DECISION_LABELS if (c.decisions or {}).get(k) is True]
        if kinds:
            title = f"check #{c.pk} {c.window_end:%Y-%m-%d %H:%M} breached: {', '.join(kinds)}"
            markers.append(Marker(c.window_end.timestamp(), "breach", title, f"/checks/{c.pk}/"))
    return markers


def chart_markers(*, model: RegisteredModel, trange: TimeRange | None) -> list[Marker]:
    """Alerts opened, retrain jobs requested and versions promoted inside the range."""
    start = trange.start if trange is not None else None
    end = trange.end if trange is not None else None

    def within(queryset: QuerySet[Any], field: str) -> QuerySet[Any]:
        if start is not None:
            queryset = queryset.filter(**{f"{field}__gte": start})
        if end is not None:
            queryset = queryset.filter(**{f"{field}__lt": end})
        return queryset.order_by(f"-{field}")[:MARKERS]

    # An alert sits at the end of the window whose check opened it: the data's time, like the points.
    alerts = Alert.objects.filter(model=model).annotate(at=Coalesce("opened_by__window_end", "opened_at"))
    markers = [
        Marker(a.at.timestamp(), "alert", f"alert #{a.pk} {a.kind} opened by check #{a.opened_by_id}")
        for a in within(alerts, "at")
    ]
    markers += [
        Marker(j.created_at.timestamp(), "retrain", f"retrain job #{j.pk} ({j.trigger}): {j.state}")
        for j in within(RetrainJob.objects.filter(model=model), "created_at")
    ]
    markers += [
        Marker(
            v.promoted_at.timestamp(), "promotion", f"v{v.version} promoted {v.promoted_at:%Y-%m-%d %H:%M}"
        )
        for v in within(ModelVersion.objects.filter(model=model, promoted_at__isnull=False), "promoted_at")
    ]
    return markers


def _version_series(checks: list[QualityCheck], metric: str) -> list[Series]:
    """One line per model version, only when the windows saw more than one version."""
    versions = sorted({v for c in checks for v in (c.per_version or {})})
    if len(versions) < 2:
        return []
    return [
        Series(
            f"{v} {metric}",
            f"s-version s-version-{i % 4}",
            [_num((c.per_version or {}).get(v, {}).get(metric)) for c in checks],
        )
        for i, v in enumerate(versions)
    ]


def _reference_lines(latest: QualityCheck, policy: MonitoringPolicy) -> list[HLine]:
    decisions = latest.decisions or {}
    baseline = _num(decisions.get("baseline"))
    if baseline is None:
        baseline = _num(policy.baseline)
    if baseline is None:
        return []
    tolerance = _num(decisions.get("tolerance")) or policy.tolerance
    edge = baseline - tolerance if policy.higher_is_better else baseline + tolerance
    return [HLine("baseline", "h-baseline", baseline), HLine("tolerance", "h-tolerance", edge)]


# --- drift ----------------------------------------------------------------------------------


def higher_is_drift(column: dict[str, Any]) -> bool | None:
    """The engine stores it with each column; checks stored before it did name their test."""
    if column.get("higher_is_drift") is not None:
        return bool(column["higher_is_drift"])
    test = STATTESTS.get(str(column.get("method")))
    return test.higher_is_drift if test else None


def drift_ratio(column: dict[str, Any]) -> float | None:
    """How far a score is towards its threshold: 1.0 is the threshold, above it drift."""
    score, threshold = _num(column.get("score")), _num(column.get("threshold"))
    if score is None or threshold is None or threshold <= 0:
        return None
    if higher_is_drift(column) is False:  # a p-value: the smaller, the further past the threshold
        return min(threshold / max(score, 1e-12), 1e3)
    return min(score / threshold, 1e3)


def drift_colour(ratio: float | None, drifted: bool) -> str:
    if ratio is None:
        return "#eceef2"
    if drifted or ratio >= 1:
        # Red deepens with each tenfold past the threshold.
        depth = min(math.log10(max(ratio, 1.0)) / 2, 1.0)
        return f"hsl({int(20 - 20 * depth)}, 80%, {int(68 - 23 * depth)}%)"
    return f"hsl({int(140 - 90 * ratio)}, 60%, {int(88 - 10 * ratio)}%)"


def drift_cell(column: dict[str, Any] | None) -> dict[str, Any]:
    if not column:
        return {"colour": drift_colour(None, False), "drifted": False, "title": "not measured"}
    ratio, drifted = drift_ratio(column), bool(column.get("drifted"))
    score, threshold = _num(column.get("score")), _num(column.get("threshold"))
    rule = (
        "p-value below threshold = drift"
        if higher_is_drift(column) is False
        else "score above threshold = drift"
    )
    title = (
        f"{column.get('method_display') or column.get('method') or 'not tested'} · "
        f"score {_fmt(score, 4)} · threshold {_fmt(threshold, 4)} ({rule})"
        f"{' · DRIFTED' if drifted else ''}{' · ' + column['note'] if column.get('note') else ''}"
    )
    return {"colour": drift_colour(ratio, drifted), "drifted": drifted, "title": title}


def drift_heatmap(*, model: RegisteredModel, trange: TimeRange | None = None) -> dict[str, Any] | None:
    """Rows: features then the prediction; columns: the latest checks in the range, oldest first."""
    checks = checks_recent(model=model, limit=HEATMAP_CHECKS, done_only=True, trange=trange)
    checks = [c for c in checks if c.drift or c.prediction_drift]
    if not checks:
        return None
    names = [f["name"] for f in model.features or []]
    seen = {n for c in checks for n in (c.drift or {}).get("columns", {})}
    names += sorted(seen - set(names))
    rows = [
        {"name": n, "cells": [drift_cell((c.drift or {}).get("columns", {}).get(n)) for c in checks]}
        for n in names
    ]
    if any((c.drift or {}).get("multivariate") for c in checks):
        cells = [drift_cell((c.drift or {}).get("multivariate")) for c in checks]
        rows.append({"name": MULTIVARIATE_ROW, "is_prediction": True, "cells": cells})
    rows.append(
        {
            "name": PREDICTION_ROW,
            "is_prediction": True,
            "cells": [drift_cell(c.prediction_drift or None) for c in checks],
        }
    )
    columns = [
        {
            "id": c.pk,
            "label": c.window_end.strftime("%Y-%m-%d %H:%M"),
            "share": _num((c.drift or {}).get("share")),
            "dataset_drift": bool((c.drift or {}).get("dataset_drift")),
        }
        for c in checks
    ]
    return {"columns": columns, "rows": rows}


def drift_rows(*, check: QualityCheck) -> list[dict[str, Any]]:
    columns = (check.drift or {}).get("columns", {})
    return [{"name": n, **c, "cell": drift_cell(c)} for n, c in columns.items()]


def data_quality_rows(*, check: QualityCheck | None) -> list[dict[str, Any]]:
    if check is None:
        return []
    columns = (check.data_quality or {}).get("columns", {})
    return [
        {
            "name": n,
            "missing_share": _num(c.get("missing_share")),
            "missing_count": c.get("missing_count"),
            "out_of_schema_share": _num(c.get("out_of_schema_share")),
            "out_of_schema_examples": c.get("out_of_schema_examples") or [],
        }
        for n, c in columns.items()
    ]


def latest_done_check(*, model: RegisteredModel) -> QualityCheck | None:
    return QualityCheck.objects.filter(model=model, state=CheckState.DONE).order_by("-window_end").first()


def _scalar_text(value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return _fmt(_num(value), 4)


def check_detail(*, check: QualityCheck) -> dict[str, Any]:
    """Everything on the check page, each part empty when the check had too little data."""
    metrics = check.metrics or {}
    policy = policy_get(model=check.model)
    scalars = [
        (k, v)
        for k, v in metrics.items()
        if k not in ("per_class", "confusion_matrix") and not k.endswith("_ci")
    ]
    classes = [str(c) for c in check.model.classes or []]
    matrix = metrics.get("confusion_matrix") or []
    return {
        "row": check_row(check=check, metric=policy.metric),
        "scalars": [(k, _scalar_text(v), _pair(metrics.get(f"{k}_ci"))) for k, v in scalars],
        "per_class": list((metrics.get("per_class") or {}).items()),
        "confusion": [
            {"label": classes[i] if i < len(classes) else str(i), "cells": row}
            for i, row in enumerate(matrix)
        ],
        "confusion_labels": classes[: len(matrix)],
        "drift": drift_rows(check=check),
        "prediction_drift": check.prediction_drift or {},
        "prediction_cell": drift_cell(check.prediction_drift) if check.prediction_drift else None,
        "data_quality": data_quality_rows(check=check),
        "has_report": check_has_report(check=check),
    }


# --- alerts ---------------------------------------------------------------------------------


def alerts_list(
    *, model: RegisteredModel | None = None, state: str | None = None, limit: int = 200
) -> list[Alert]:
    """Open first, then acknowledged, then resolved; newest first within each."""
    queryset = Alert.objects.select_related("model")
    if model is not None:
        queryset = queryset.filter(model=model)
    if state in AlertState.values:
        queryset = queryset.filter(state=state)
    rank = Case(
        When(state=AlertState.OPEN, then=Value(0)),
        When(state=AlertState.ACKNOWLEDGED, then=Value(1)),
        default=Value(2),
        output_field=IntegerField(),
    )
    cooldown = Subquery(
        MonitoringPolicy.objects.filter(model=OuterRef("model")).values("cooldown_minutes")[:1]
    )
    queryset = queryset.annotate(rank=rank, cooldown=cooldown).select_related("last_check")
    return list(queryset.order_by("rank", "-opened_at")[:limit])


def alert_counts() -> dict[str, int]:
    counts = Alert.objects.aggregate(
        **{s: Count("pk", filter=Q(state=s)) for s in AlertState.values}, all=Count("pk")
    )
    return {k: v or 0 for k, v in counts.items()}


def alert_get(*, alert_id: int) -> Alert:
    alert = Alert.objects.select_related("model").filter(pk=alert_id).first()
    if alert is None:
        raise Http404(f"no alert {alert_id}")
    return alert
