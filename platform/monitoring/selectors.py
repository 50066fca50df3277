"""Reads for monitoring: policies, checks and alerts as the API, the admin and the dashboard read them."""

from datetime import datetime
from typing import Any

from django.db.models import Case, Count, F, IntegerField, OuterRef, Q, Subquery, Value, When
from django.db.models.fields.json import KeyTransform
from django.http import Http404

from monitoring.models import Alert, AlertState, CheckDistribution, CheckState, MonitoringPolicy, QualityCheck
from monitoring.policy import default_metric
from registry.models import RegisteredModel
from registry.reference import PREDICTION
from workers.drift.result import StoredCheck, StoredScore, check_read, drift_read, score_read


def policy_for(model: RegisteredModel) -> MonitoringPolicy:
    """The model's policy; a model without a stored one gets the defaults (unsaved: a read never
    writes; monitoring.policy.policy_ensure stores it)."""
    policy = MonitoringPolicy.objects.filter(model=model).first()
    return policy or MonitoringPolicy(model=model, metric=default_metric(model.task))


CHECK_JSON_COLUMNS = (
    "metrics",
    "estimated",
    "per_version",
    "labels",
    "drift",
    "prediction_drift",
    "data_quality",
    "decisions",
)


def check_result(*, check: QualityCheck) -> StoredCheck:
    """The check's eight JSON columns, read into the typed result (workers.drift.result)."""
    return check_read({name: getattr(check, name) for name in CHECK_JSON_COLUMNS})


def check_get(*, check_id: int) -> QualityCheck:
    check = QualityCheck.objects.select_related("model", "version").filter(pk=check_id).first()
    if check is None:
        raise Http404(f"no check {check_id}")
    return check


def latest_done_check(*, model: RegisteredModel) -> QualityCheck | None:
    return QualityCheck.objects.filter(model=model, state=CheckState.DONE).order_by("-window_end").first()


def checks_list(
    *, model: RegisteredModel, start: datetime | None = None, end: datetime | None = None, limit: int = 1000
) -> list[QualityCheck]:
    """The model's checks, oldest window first; ``start``/``end`` keep those whose window ends
    within them."""
    checks = QualityCheck.objects.filter(model=model).select_related("model", "version")
    if start is not None:
        checks = checks.filter(window_end__gte=start)
    if end is not None:
        checks = checks.filter(window_end__lte=end)
    return list(checks.order_by("window_end")[:limit])


def check_for_window(
    *, model: RegisteredModel, spec: str, end: datetime, state: str | None = None
) -> QualityCheck | None:
    """The check stored for that window (in that state, if given)."""
    checks = QualityCheck.objects.filter(model=model, window_spec=spec, window_end=end)
    if state is not None:
        checks = checks.filter(state=state)
    return checks.first()


def alert_get(*, alert_id: int) -> Alert:
    alert = Alert.objects.select_related("model").filter(pk=alert_id).first()
    if alert is None:
        raise Http404(f"no alert {alert_id}")
    return alert


def alerts_list(
    *, model: RegisteredModel | None = None, state: str | None = None, limit: int = 200
) -> list[Alert]:
    """Open first, then acknowledged, then resolved; newest first within each. Each alert carries
    its model's ``cooldown`` (minutes), which a resolve button explains."""
    queryset = Alert.objects.select_related("model", "last_check")
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
    queryset = queryset.annotate(rank=rank, cooldown=cooldown)
    return list(queryset.order_by("rank", "-opened_at")[:limit])


def model_alerts(*, model: RegisteredModel, state: str | None = None, limit: int = 1000) -> list[Alert]:
    """The model's alerts, newest first (the API's order), in one state if given."""
    alerts = Alert.objects.filter(model=model).select_related("model")
    if state is not None:
        alerts = alerts.filter(state=state)
    return list(alerts.order_by("-opened_at")[:limit])


def alert_counts() -> dict[str, int]:
    """Alerts per state, and ``all``."""
    counts = Alert.objects.aggregate(
        **{s: Count("pk", filter=Q(state=s)) for s in AlertState.values}, all=Count("pk")
    )
    return {k: v or 0 for k, v in counts.items()}


# -- one column's drift over time (the heat map's drill-down) -------------------------------------
def _stored_column(column: str) -> KeyTransform | F:
    """Where a check stores a column's drift: ``prediction_drift``, or ``drift.columns[<name>]``
    (a key transform, so any feature name is safe, "__" included)."""
    if column == PREDICTION:
        return F("prediction_drift")
    return KeyTransform(column, KeyTransform("columns", "drift"))


def column_drift_series(
    *,
    model: RegisteredModel,
    column: str,
    start: datetime | None = None,
    end: datetime | None = None,
    limit: int = 500,
) -> list[dict[str, Any]]:
    """One point per finished check (the newest ``limit`` in the range, oldest first): its id,
    window end and the stored drift of ``column`` (a ``StoredScore``, None when it was not
    measured). Reads that one JSON value of each check row, never the samples."""
    checks = QualityCheck.objects.filter(model=model, state=CheckState.DONE)
    if start is not None:
        checks = checks.filter(window_end__gt=start)
    if end is not None:
        checks = checks.filter(window_end__lt=end)
    rows = checks.annotate(stored=_stored_column(column)).order_by("-window_end", "-pk")
    newest = list(rows.values("pk", "window_end", "stored")[:limit])
    return [
        {"id": r["pk"], "window_end": r["window_end"], "column": score_read(r["stored"])}
        for r in reversed(newest)
    ]


def column_effects(*, model: RegisteredModel, column: str, check_ids: list[int]) -> dict[int, float]:
    """PSI per check for ``column``, from the stored distributions."""
    rows = CheckDistribution.objects.filter(
        quality_check__model=model, quality_check_id__in=check_ids, column=column
    ).values_list("quality_check_id", "psi")
    return dict(rows)


def check_distribution_get(*, check: QualityCheck, column: str) -> CheckDistribution | None:
    return CheckDistribution.objects.filter(quality_check=check, column=column).first()


def check_column_drift(*, check: QualityCheck, column: str) -> StoredScore | None:
    if column == PREDICTION:
        return score_read(check.prediction_drift)
    columns = drift_read(check.drift).columns
    return columns[column] if column in columns else None
