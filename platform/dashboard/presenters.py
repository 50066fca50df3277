"""What the pages show, shaped from the rows the selectors read: table rows, statuses, badges,
sparklines and texts. No query is written here; each function calls a selector for its rows.
"""

from typing import Any
from urllib.parse import urlsplit

from dashboard import selectors
from dashboard.heatmap import drift_cell, drift_rows
from dashboard.numbers import finite, interval, scalar_text
from dashboard.timerange import TimeRange
from monitoring.alert_kinds import ALERT_KINDS
from monitoring.models import MonitoringPolicy, QualityCheck
from monitoring.segment_rules import policy_segments, segment_entries
from monitoring.selectors import policy_for
from registry.models import ReferenceDataset, RegisteredModel
from workers.drift.result import (
    StoredDecisions,
    data_quality_read,
    decisions_read,
    drift_read,
    estimate_read,
    labels_read,
    metrics_read,
    score_read,
)

TABLE_CHECKS = 50
HOME_STATUSES = ("healthy", "warning", "drifting", "retraining", "no data")
SPARK_W, SPARK_H, SPARK_CHECKS = 120, 28, 20


# --- home -----------------------------------------------------------------------------------


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
    decisions = decisions_read(latest.decisions if latest else None)
    if drift_alerts or (latest and drift_read(latest.drift).dataset_drift):
        return "drifting"
    if open_alerts or any(decisions.verdict(k) is True for k in ALERT_KINDS):
        return "warning"
    return "healthy" if latest else "no data"


def model_rows(*, name: str | None = None) -> list[dict[str, Any]]:
    """One row per model for the home page: status, champion, latest check, sparkline, live alerts.

    Read from check and alert rows only: never a count over the raw samples, which grow without
    bound (the latest check carries the window's sample and label counts)."""
    return [_model_row(m) for m in selectors.models_with_counts(name=name)]


def _metric(check: QualityCheck, metric: str) -> float | None:
    return metrics_read(check.metrics).value(metric)


def _model_row(model: RegisteredModel) -> dict[str, Any]:
    metric = policy_for(model).metric
    # The sparkline's checks without their drift and label JSON; the (at most two) rows shown in
    # full are read again whole.
    recent = selectors.done_checks_newest_first(model=model, limit=SPARK_CHECKS, light=True)
    # The newest window may have no labels yet: the last realised value is then the one to show.
    latest = recent[0] if recent else None
    realised = next((c for c in recent if _metric(c, metric) is not None), None)
    whole = selectors.checks_by_id(ids=[c.pk for c in (latest, realised) if c is not None])
    latest = whole[latest.pk] if latest is not None else None
    realised = whole[realised.pk] if realised is not None else None
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
        "latest": check_row(check=latest, metric=metric) if latest else None,
        "realised": check_row(check=realised, metric=metric) if realised else None,
        # The latest window has no labels yet, so the page shows the last realised value, marked *.
        "realised_fallback": bool(latest and realised and _metric(latest, metric) is None),
        "spark_realised": sparkline([_metric(c, metric) for c in reversed(recent)]),
        "spark_estimated": sparkline([estimate_read(c.estimated).value for c in reversed(recent)]),
    }


def model_rows_filtered(*, query: str = "", status: str = "") -> list[dict[str, Any]]:
    """The home page's rows, narrowed by a name search and a status."""
    rows = model_rows()
    if query:
        rows = [r for r in rows if query.lower() in r["name"].lower()]
    if status in HOME_STATUSES:
        rows = [r for r in rows if r["status"] == status]
    return rows


# --- policy ---------------------------------------------------------------------------------


def baseline_text(*, policy: MonitoringPolicy, reference: ReferenceDataset | None) -> str:
    """Where the baseline comes from, as the checks compute it (monitoring.checks)."""
    if policy.baseline is not None:
        return f"{policy.baseline:.4f} (set in the policy)"
    value = finite((reference.baseline_metrics or {}).get(policy.metric)) if reference else None
    if value is not None:
        return f"{value:.4f} (the model's {policy.metric} on its reference rows)"
    if reference is None:
        return "none: no reference dataset"
    return "none: the reference rows carry no predictions"


def threshold_rule_text(*, policy: MonitoringPolicy) -> str:
    """The policy's threshold rule, as the checks apply it (monitoring.checks.thresholds_for)."""
    if policy.threshold_rule == "reference_band":
        return (
            f"reference band: mean ± {policy.band_sigmas:g} sd of {policy.metric} over the reference's "
            f"windows (baseline ± {policy.tolerance:g} while the reference is too small for a band)"
        )
    if policy.threshold_rule == "relative":
        return f"relative: within {policy.relative_tolerance:.2%} of the baseline"
    return f"absolute: baseline ± {policy.tolerance:g}"


def notify_text(*, policy: MonitoringPolicy, staff: bool) -> str:
    """E-mails, and the webhooks' hosts for staff only: their paths and queries often carry credentials."""
    targets = policy.emails()
    if staff:
        for label, url in (("webhook", policy.webhook_url), ("Slack webhook", policy.slack_webhook_url)):
            if url:
                targets.append(f"{label} to {urlsplit(url).hostname or '?'}")
        if policy.pagerduty_routing_key:
            targets.append(f"PagerDuty via {urlsplit(policy.pagerduty_url).hostname or '?'}")
    return ", ".join(targets) or "—"


def policy_rows(
    *, policy: MonitoringPolicy, reference: ReferenceDataset | None = None, staff: bool = False
) -> list[tuple[str, Any]]:
    unit = {"samples": "samples", "labelled": "labelled samples"}.get(policy.window_kind, "hours")
    return [
        ("enabled", policy.enabled),
        ("window", f"last {policy.window_size} {unit}"),
        ("check every", f"{policy.check_every_minutes} min"),
        ("min samples / labels", f"{policy.min_samples} / {policy.min_labels}"),
        ("metric", policy.metric),
        ("baseline", baseline_text(policy=policy, reference=reference)),
        ("threshold rule", threshold_rule_text(policy=policy)),
        ("tolerance", policy.tolerance),
        ("dataset drift at share", policy.drift_share),
        ("alert when", f"{policy.alert_k} of last {policy.alert_n} checks breach"),
        ("cooldown", f"{policy.cooldown_minutes} min"),
        ("auto retrain", policy.auto_retrain),
        ("notify", notify_text(policy=policy, staff=staff)),
        ("next check", policy.next_check_at),
    ]


# --- checks ---------------------------------------------------------------------------------


def decision_badges(decisions: StoredDecisions) -> list[dict[str, str]]:
    """True: breach, False: fine, None: not enough data to decide."""
    badges = []
    for key, spec in ALERT_KINDS.items():
        label, short, value = spec.label, spec.short, decisions.verdict(key)
        css = "bad" if value is True else "ok" if value is False else "na"
        verdict = "breach" if value is True else "fine" if value is False else "not enough data to decide"
        badges.append(
            {"key": key, "label": label, "short": short, "css": css, "title": f"{label}: {verdict}"}
        )
    return badges


def quality_point(check: QualityCheck, metric: str) -> dict[str, Any]:
    """The quality numbers one check shows (in the table and the chart), read only from the
    columns a light fetch loads."""
    metrics, estimated = metrics_read(check.metrics), estimate_read(check.estimated)
    return {
        "value": metrics.value(metric),
        "ci": interval(metrics.interval(metric)),
        "accuracy": metrics.value("accuracy"),
        "estimated": estimated.value,
        "estimated_ci": interval(estimated.ci),
        "estimate_error": estimated.error,
    }


def check_row(*, check: QualityCheck, metric: str) -> dict[str, Any]:
    """The numbers one check contributes to a table row."""
    drift = drift_read(check.drift)
    return {
        "id": check.pk,
        "check": check,
        "state": check.state,
        "metric": metric,
        **quality_point(check, metric),
        "coverage": labels_read(check.labels).label_coverage,
        "drift_share": drift.share,
        "dataset_drift": drift.dataset_drift,
        "badges": decision_badges(decisions_read(check.decisions)),
    }


def check_rows(
    *, model: RegisteredModel, metric: str, limit: int = TABLE_CHECKS, trange: TimeRange | None = None
) -> list[dict[str, Any]]:
    """The model page's check table, newest first."""
    checks = selectors.checks_recent(model=model, limit=limit, trange=trange)
    return [check_row(check=c, metric=metric) for c in reversed(checks)]


def data_quality_rows(*, check: QualityCheck | None) -> list[dict[str, Any]]:
    if check is None:
        return []
    columns = data_quality_read(check.data_quality).columns
    return [
        {
            "name": n,
            "missing_share": c.missing_share,
            "missing_count": c.missing_count,
            "out_of_schema_share": c.out_of_schema_share,
            "out_of_schema_examples": list(c.out_of_schema_examples),
        }
        for n, c in columns.items()
    ]


def _confusion(check: QualityCheck) -> list[dict[str, Any]]:
    classes = [str(c) for c in check.model.classes or []]
    matrix = metrics_read(check.metrics).confusion_matrix
    return [
        {"label": classes[i] if i < len(classes) else str(i), "cells": row} for i, row in enumerate(matrix)
    ]


def check_detail(*, check: QualityCheck) -> dict[str, Any]:
    """Everything on the check page, each part empty when the check had too little data."""
    metrics = metrics_read(check.metrics)
    confusion = _confusion(check)
    prediction = score_read(check.prediction_drift)
    return {
        "row": check_row(check=check, metric=policy_for(check.model).metric),
        "scalars": [(k, scalar_text(v), interval(metrics.interval(k))) for k, v in metrics.scalars],
        "per_class": list(metrics.per_class.items()),
        "confusion": confusion,
        "confusion_labels": [str(c) for c in check.model.classes or []][: len(confusion)],
        "drift": drift_rows(check=check),
        "prediction_drift": prediction,
        "prediction_cell": drift_cell(prediction) if prediction else None,
        "data_quality": data_quality_rows(check=check),
        "has_report": selectors.check_has_report(check=check),
    }


# --- segments -------------------------------------------------------------------------------


def segment_rows(*, check: QualityCheck | None, policy: MonitoringPolicy) -> list[dict[str, Any]]:
    """One row per segment value of the check (the policy's features in order): size, quality,
    estimate, drift share, verdicts, and why a small segment decided nothing."""
    if check is None:
        return []
    rows, metric = [], policy.metric
    order = [spec.feature for spec in policy_segments(policy)]
    for key, entry in segment_entries(check.segments, order).items():
        decisions = decisions_read(entry.get("decisions"))
        rows.append(
            {
                "key": key,
                "n_samples": entry.get("n_samples", 0),
                "n_labelled": entry.get("n_labelled", 0),
                "value": metrics_read(entry.get("metrics")).value(metric),
                "estimated": estimate_read(entry.get("estimated")).value,
                "drift_share": drift_read(entry.get("drift")).share,
                "badges": decision_badges(decisions),
                "undecided": (entry.get("decisions") or {}).get("undecided"),
            }
        )
    return rows
