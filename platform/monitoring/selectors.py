"""Reads for monitoring: policies, checks and alerts as the API, the admin and the dashboard read them."""

from django.db.models import Case, Count, IntegerField, OuterRef, Q, Subquery, Value, When
from django.http import Http404

from monitoring.models import Alert, AlertState, CheckState, MonitoringPolicy, QualityCheck
from monitoring.policy import default_metric
from registry.models import RegisteredModel


def policy_for(model: RegisteredModel) -> MonitoringPolicy:
    """The model's policy; a model without a stored one gets the defaults (unsaved: a read never
    writes; monitoring.policy.policy_ensure stores it)."""
    policy = MonitoringPolicy.objects.filter(model=model).first()
    return policy or MonitoringPolicy(model=model, metric=default_metric(model.task))


def check_get(*, check_id: int) -> QualityCheck:
    check = QualityCheck.objects.select_related("model", "version").filter(pk=check_id).first()
    if check is None:
        raise Http404(f"no check {check_id}")
    return check


def latest_done_check(*, model: RegisteredModel) -> QualityCheck | None:
    return QualityCheck.objects.filter(model=model, state=CheckState.DONE).order_by("-window_end").first()


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


def alert_counts() -> dict[str, int]:
    """Alerts per state, and ``all``."""
    counts = Alert.objects.aggregate(
        **{s: Count("pk", filter=Q(state=s)) for s in AlertState.values}, all=Count("pk")
    )
    return {k: v or 0 for k, v in counts.items()}
