"""The model page's quality chart: which series, bands, lines and markers it draws, from the
check rows the selectors read. The SVG geometry is dashboard.charts'."""

from typing import Any

from django.utils.safestring import mark_safe

from dashboard import selectors
from dashboard.charts import HLine, Marker, Series, chart_svg, line_chart
from dashboard.numbers import finite, fixed, interval_text
from dashboard.presenters import quality_point
from dashboard.timerange import TimeRange
from monitoring.alert_kinds import ALERT_KINDS
from monitoring.models import Alert, MonitoringPolicy, QualityCheck
from registry.models import RegisteredModel
from workers.drift.result import decisions_read, per_version_read

BOUNDED_METRICS = ("accuracy", "f1_macro", "precision_macro", "recall_macro", "roc_auc")


def _label(check: QualityCheck) -> str:
    return check.window_end.strftime("%Y-%m-%d %H:%M")


def _realised_series(checks: list[QualityCheck], points: list[dict[str, Any]], metric: str) -> Series:
    return Series(
        f"{metric} (realised)",
        "s-realised",
        [p["value"] for p in points],
        band=[p["ci"] for p in points],
        titles=[
            f"{_label(c)} · {metric} {fixed(p['value'])}{interval_text(p['ci'])} · n={c.n_labelled}"
            for p, c in zip(points, checks, strict=True)
        ],
    )


def _estimated_title(check: QualityCheck, point: dict[str, Any]) -> str:
    error = point["estimate_error"]
    return (
        f"{_label(check)} · estimated {fixed(point['estimated'])}{interval_text(point['estimated_ci'])}"
        + (f" · error {error:+.3f}" if error is not None else "")
    )


def _estimated_series(checks: list[QualityCheck], points: list[dict[str, Any]]) -> Series:
    return Series(
        "estimated accuracy (CBPE)",
        "s-estimated",
        [p["estimated"] for p in points],
        band=[p["estimated_ci"] for p in points],
        titles=[_estimated_title(c, p) for c, p in zip(checks, points, strict=True)],
    )


def _version_series(checks: list[QualityCheck], metric: str) -> list[Series]:
    """One line per model version, only when the windows saw more than one version."""
    per_version = [per_version_read(c.per_version) for c in checks]
    versions = sorted({v for p in per_version for v in p})
    if len(versions) < 2:
        return []
    return [
        Series(
            f"{v} {metric}",
            f"s-version s-version-{i % 4}",
            [p[v].value(metric) if v in p else None for p in per_version],
        )
        for i, v in enumerate(versions)
    ]


def _series(model: RegisteredModel, checks: list[QualityCheck], metric: str) -> list[Series]:
    points = [quality_point(c, metric) for c in checks]
    series = [_realised_series(checks, points, metric)]
    if model.is_classification:
        if metric != "accuracy":
            series.append(Series("accuracy (realised)", "s-accuracy", [p["accuracy"] for p in points]))
        series.append(_estimated_series(checks, points))
    return series + _version_series(checks, metric)


def _reference_lines(latest: QualityCheck, policy: MonitoringPolicy) -> list[HLine]:
    """The latest check's thresholds: the reference band (its mean and both edges) when that
    rule decided, else the baseline and the edge the tolerance sets."""
    decisions = decisions_read(latest.decisions)
    baseline = finite(decisions.baseline)
    if baseline is None:
        baseline = finite(policy.baseline)
    if baseline is None:
        return []
    lines = [HLine("baseline", "h-baseline", baseline)]
    if decisions.band is not None:
        lines[0] = HLine("reference mean", "h-baseline", baseline)
        low, high = decisions.band
        edges = [("reference band (low)", low), ("reference band (high)", high)]
        return lines + [HLine(label, "h-tolerance h-band", v) for label, v in edges if v is not None]
    edge = finite(decisions.threshold)
    if edge is None:
        tolerance = finite(decisions.tolerance) or policy.tolerance
        edge = baseline - tolerance if policy.higher_is_better else baseline + tolerance
    return [*lines, HLine("tolerance", "h-tolerance", edge)]


def _breach_markers(checks: list[QualityCheck]) -> list[Marker]:
    markers = []
    for c in checks:
        decisions = decisions_read(c.decisions)
        kinds = [spec.label for k, spec in ALERT_KINDS.items() if decisions.verdict(k) is True]
        if kinds:
            title = f"check #{c.pk} {c.window_end:%Y-%m-%d %H:%M} breached: {', '.join(kinds)}"
            markers.append(Marker(c.window_end.timestamp(), "breach", title, f"/checks/{c.pk}/"))
    return markers


def _alert_marker(alert: Alert) -> Marker:
    at = alert.at  # type: ignore[attr-defined]  # selectors.alerts_opened_in annotates it
    return Marker(
        at.timestamp(), "alert", f"alert #{alert.pk} {alert.kind} opened by check #{alert.opened_by_id}"
    )


def chart_markers(*, model: RegisteredModel, trange: TimeRange | None) -> list[Marker]:
    """Alerts opened, retrain jobs requested and versions promoted inside the range."""
    markers = [_alert_marker(a) for a in selectors.alerts_opened_in(model=model, trange=trange)]
    markers += [
        Marker(j.created_at.timestamp(), "retrain", f"retrain job #{j.pk} ({j.trigger}): {j.state}")
        for j in selectors.jobs_requested_in(model=model, trange=trange)
    ]
    markers += [
        Marker(
            v.promoted_at.timestamp(), "promotion", f"v{v.version} promoted {v.promoted_at:%Y-%m-%d %H:%M}"
        )
        for v in selectors.versions_promoted_in(model=model, trange=trange)
        if v.promoted_at is not None
    ]
    return markers


def _x_range(trange: TimeRange | None) -> tuple[float, float] | None:
    """A custom range is drawn whole; a preset spans the checks inside it (two checks an hour
    apart would otherwise sit in the last pixels of a week)."""
    if trange is not None and trange.key == "custom" and trange.start is not None and trange.end is not None:
        return (trange.start.timestamp(), trange.end.timestamp())
    return None


def quality_chart(
    *, model: RegisteredModel, policy: MonitoringPolicy, trange: TimeRange | None = None
) -> dict[str, Any] | None:
    """Realised metric with its CI band, the CBPE estimate beside it, baseline and tolerance lines,
    per-version lines, and markers for breaches, alerts, retrain jobs and promotions, on a real
    time axis (each check at its window's end). None when nothing has a value yet."""
    checks = selectors.chart_checks(model=model, trange=trange)
    if not checks:
        return None
    metric = policy.metric
    chart = line_chart(
        times=[c.window_end.timestamp() for c in checks],
        series=_series(model, checks, metric),
        hlines=_reference_lines(checks[-1], policy),
        clamp=(0.0, 1.0) if metric in BOUNDED_METRICS else None,
        y_label=metric,
        x_range=_x_range(trange),
        markers=_breach_markers(checks) + chart_markers(model=model, trange=trange),
    )
    if chart is not None:
        chart["metric"] = metric
        chart["svg"] = mark_safe(chart_svg(chart))  # noqa: S308 (every value is escaped in chart_svg)
    return chart
