"""Alert lifecycle: open (k of n breaching checks, outside cooldown), keep, auto-resolve.

At most one live (open or acknowledged) alert per model and kind, enforced by a constraint.
"""

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING

from django.db import IntegrityError, transaction
from django.db.models import QuerySet
from django.utils import timezone

from core.enqueue import enqueue
from monitoring.alert_kinds import ALERT_KINDS, alert_kind, alert_kind_retrains
from monitoring.destinations import policy_targets
from monitoring.models import LIVE_ALERT_STATES, Alert, AlertState, CheckState, Notification, QualityCheck
from monitoring.segment_rules import segment_entries
from monitoring.selectors import check_result, policy_for
from workers import queues
from workers.drift.result import check_read, decisions_read

if TYPE_CHECKING:
    from monitoring.models import MonitoringPolicy

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class AlertChanges:
    opened: list[Alert] = field(default_factory=list)
    resolved: list[Alert] = field(default_factory=list)


def alerts_evaluate(
    *, check: QualityCheck, policy: "MonitoringPolicy", kinds: Iterable[str] = ALERT_KINDS
) -> AlertChanges:
    """Apply one finished check's decisions to the model's alerts (of ``kinds``: a refresh with
    late labels applies only the realised breach it decided): the whole model's, then each
    segment's (its own series of verdicts, the same rules, an alert carrying the segment).

    Opening: k of the last n checks of the series breach, outside the cooldown. Resolving (any
    kind): the last `resolve_after` checks of the series are all clear, so a condition that
    dips under its threshold for one check does not flap (Prometheus' keep_firing_for).
    """
    changes = AlertChanges()
    kinds = tuple(kinds)
    segments = ["", *segment_entries(check.segments)]
    for segment in segments:
        for kind in kinds:
            _evaluate(check, policy, kind, segment, changes)
    _resolve_unmeasured(check, policy, kinds, segments, changes)
    return changes


UNMEASURED = (
    "its segment was not measured by the last {n} checks (the policy dropped it, or it left the top values)"
)


def _resolve_unmeasured(
    check: QualityCheck,
    policy: "MonitoringPolicy",
    kinds: Iterable[str],
    measured: list[str],
    changes: AlertChanges,
) -> None:
    """A live segment alert whose segment the check no longer measures can never be decided clear:
    it resolves once ``resolve_after`` consecutive checks of the series have not measured it."""
    need = max(policy.resolve_after, 1)
    stale = Alert.objects.filter(
        model_id=check.model_id, kind__in=kinds, state__in=LIVE_ALERT_STATES
    ).exclude(segment__in=measured)
    for alert in stale.select_related("opened_by"):
        series = check_series(check)
        if alert.opened_by is not None:
            series = series.filter(window_end__gt=alert.opened_by.window_end)
        recent = list(series.only("segments")[:need])
        if len(recent) < need or any(alert.segment in segment_entries(c.segments) for c in recent):
            continue
        reason = UNMEASURED.format(n=need)
        Alert.objects.filter(pk=alert.pk).update(details={**alert.details, "resolved_because": reason})
        if alert_resolve(alert=alert, check=check):
            changes.resolved.append(alert)


def _evaluate(
    check: QualityCheck, policy: "MonitoringPolicy", kind: str, segment: str, changes: AlertChanges
) -> None:
    decision = _verdict(check, kind, segment)
    live = (
        Alert.objects.filter(model_id=check.model_id, kind=kind, segment=segment, state__in=LIVE_ALERT_STATES)
        .select_related("last_check")
        .first()
    )
    if live is not None:
        if _clear_for(check, policy, kind, live) and alert_resolve(alert=live, check=check):
            changes.resolved.append(live)
        elif live.last_check is not None and live.last_check.window_end > check.window_end:
            pass  # an older check refreshed late: the alert already tells a newer one's state
        elif decision is True:
            # Still breaching: the message tells the current state, not the opening one.
            details = {
                **live.details,
                "last_seen_at": check.window_end.isoformat(),
                "last_seen_check": check.pk,
            }
            Alert.objects.filter(pk=live.pk).update(
                last_check=check, message=_message(kind, check, segment), details=details
            )
        else:
            Alert.objects.filter(pk=live.pk).update(last_check=check)
    elif (
        decision is True
        and _k_of_n(check, policy, kind, segment)
        and not _in_cooldown(check, policy, kind, segment)
    ):
        alert = _open(check, policy, kind, segment)
        if alert is not None:
            changes.opened.append(alert)


def _segment_columns(check: QualityCheck, segment: str) -> Mapping[str, object] | None:
    """The check's JSON columns for the whole model (segment ""), or one segment's entry."""
    if not segment:
        return {"decisions": check.decisions}
    return segment_entries(check.segments).get(segment)


def _verdict(check: QualityCheck, kind: str, segment: str) -> bool | None:
    columns = _segment_columns(check, segment)
    return decisions_read(columns.get("decisions")).verdict(kind) if columns is not None else None


def check_series(check: QualityCheck) -> QuerySet[QualityCheck]:
    """The series k-of-n, cooldown and resolution count: the model's finished checks ordered by
    window end (newest first) up to this one, whatever their window spec (scheduled, or a
    range posted to the API), so a backfill of range checks behaves like the schedule."""
    return QualityCheck.objects.filter(
        model_id=check.model_id, state=CheckState.DONE, window_end__lte=check.window_end
    ).order_by("-window_end", "-pk")


def _k_of_n(check: QualityCheck, policy: "MonitoringPolicy", kind: str, segment: str = "") -> bool:
    recent = check_series(check)[: max(policy.alert_n, 1)]
    breaches = sum(1 for c in recent if _verdict(c, kind, segment) is True)
    return breaches >= max(policy.alert_k, 1)


def _clear_for(check: QualityCheck, policy: "MonitoringPolicy", kind: str, alert: Alert) -> bool:
    """The condition has been clear (decided False, not merely undecided) for `resolve_after`
    consecutive checks of the series since the alert opened."""
    need = max(policy.resolve_after, 1)
    series = check_series(check)
    if alert.opened_by_id is not None and alert.opened_by is not None:
        series = series.filter(window_end__gt=alert.opened_by.window_end)
    recent = list(series[:need])
    return len(recent) == need and all(_verdict(c, kind, alert.segment) is False for c in recent)


def _in_cooldown(check: QualityCheck, policy: "MonitoringPolicy", kind: str, segment: str = "") -> bool:
    """Measured in the checks' own time (window ends), so backfills and replays behave; an
    alert resolved by hand, with no check behind it, counts from its wall-clock resolution."""
    cooldown = timedelta(minutes=policy.cooldown_minutes)
    resolved = Alert.objects.filter(
        model_id=check.model_id, kind=kind, segment=segment, state=AlertState.RESOLVED
    )
    by_check = resolved.filter(last_check__window_end__gt=check.window_end - cooldown)
    by_hand = resolved.filter(last_check__isnull=True, resolved_at__gt=timezone.now() - cooldown)
    return by_check.exists() or by_hand.exists()


def _message(kind: str, check: QualityCheck, segment: str = "") -> str:
    if not segment:
        return alert_kind(kind).message(check_result(check=check))
    return f"{segment}: {alert_kind(kind).message(check_read(_segment_columns(check, segment) or {}))}"


def _open(check: QualityCheck, policy: "MonitoringPolicy", kind: str, segment: str = "") -> Alert | None:
    decisions = (_segment_columns(check, segment) or {}).get("decisions")
    details: dict[str, object] = {
        "check": check.pk,
        "decisions": decisions,
        "retrain_requested": bool(policy.auto_retrain and alert_kind_retrains(kind)),
    }
    if segment:
        details["segment"] = segment
    try:
        with transaction.atomic():
            alert = Alert.objects.create(
                model_id=check.model_id,
                kind=kind,
                segment=segment,
                severity=alert_kind(kind).severity(decisions_read(decisions)),
                message=_message(kind, check, segment),
                opened_by=check,
                last_check=check,
                opened_at=timezone.now(),
                details=details,
            )
    except IntegrityError:
        return None  # another check opened it first: no duplicate alert
    logger.info(
        "alert opened: alert=%s model=%s kind=%s segment=%s check=%s",
        alert.pk,
        check.model_id,
        kind,
        segment or "-",
        check.pk,
    )
    notifications_create(alert=alert, policy=policy, event="opened")
    return alert


def alert_resolve(*, alert: Alert, check: QualityCheck | None = None) -> bool:
    updated = Alert.objects.filter(pk=alert.pk, state__in=LIVE_ALERT_STATES).update(
        state=AlertState.RESOLVED, resolved_at=timezone.now(), last_check=check, resolved_by_check=check
    )
    if updated:
        logger.info(
            "alert resolved: alert=%s model=%s kind=%s check=%s",
            alert.pk,
            alert.model_id,
            alert.kind,
            check.pk if check else None,
        )
        notifications_create(alert=alert, policy=policy_for(alert.model), event="resolved")
    return bool(updated)


def alert_acknowledge(*, alert: Alert, by: str | None = None) -> bool:
    """Open → acknowledged, recording who (a username) when a person did it."""
    details = {**alert.details, "acknowledged_by": by} if by else alert.details
    return bool(
        Alert.objects.filter(pk=alert.pk, state=AlertState.OPEN).update(
            state=AlertState.ACKNOWLEDGED, acknowledged_at=timezone.now(), details=details
        )
    )


def notifications_create(*, alert: Alert, policy: "MonitoringPolicy", event: str) -> list[Notification]:
    created = []
    for channel, target in policy_targets(policy):
        notification, new = Notification.objects.get_or_create(
            alert=alert, event=event, channel=channel, target=target
        )
        if new:
            created.append(notification)
            enqueue(queues.DELIVER_NOTIFICATION, args=[notification.pk])
    return created
