"""Asking for a retrain: one live job per model, from an admin, the API or an alert."""

import logging
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from core.audit import audit_record
from core.errors import Conflict
from monitoring.alert_kinds import retrain_alert_kinds
from monitoring.models import Alert, AlertState, QualityCheck
from monitoring.selectors import policy_for
from registry.models import ModelVersion, RegisteredModel, VersionStatus
from retraining.joblog import job_log
from retraining.models import ACTIVE_STATES, Decision, GpuPlacement, JobState, RetrainJob, Trigger
from retraining.placement import placement_request
from retraining.selectors import retrain_policy_for
from workers.drift.result import decisions_read

logger = logging.getLogger(__name__)

# An alert whose job failed the gate (or failed) may try again once the retrain cooldown is over:
# with more post-drift data the next challenger can pass. So may one whose promoted champion still
# breaches in a later check. A person's decision (waiting, rejected, rolled back) stops it.
HUMAN_OR_WAITING = (Decision.AWAITING_APPROVAL, Decision.ROLLED_BACK, Decision.REJECTED)


class JobAlreadyActive(Conflict):
    def __init__(self, job: RetrainJob) -> None:
        super().__init__(f"retrain job #{job.pk} of {job.model.name} is already {job.state}")
        self.job = job


def active_job(model: RegisteredModel) -> RetrainJob | None:
    return RetrainJob.objects.filter(model=model, state__in=ACTIVE_STATES).first()


def job_request(
    *, model: RegisteredModel, trigger: str, requested_by: Any = None, alert: Alert | None = None
) -> RetrainJob:
    """A queued job, enqueued after commit; JobAlreadyActive (409) when the model has one."""
    champion = ModelVersion.objects.filter(model=model, status=VersionStatus.CHAMPION).first()
    try:
        with transaction.atomic():
            job = RetrainJob.objects.create(
                model=model,
                trigger=trigger,
                requested_by=requested_by if getattr(requested_by, "pk", None) else None,
                alert=alert,
                champion=champion,
            )
            actor = requested_by if getattr(requested_by, "pk", None) else f"retraining ({trigger})"
            audit_record(actor=actor, action="retrain.request", target=job, details={"trigger": trigger})
    except IntegrityError:
        # The partial unique constraint: another trigger got there first.
        existing = active_job(model)
        if existing is None:
            raise
        raise JobAlreadyActive(existing) from None
    job_enqueue(job)
    logger.info("retrain job=%s model=%s requested (%s, trigger %s)", job.pk, model.pk, model.name, trigger)
    return job


def job_enqueue(job: RetrainJob) -> None:
    placement_request(job)  # GPU placement routes it


def job_cancel(*, job: RetrainJob) -> RetrainJob:
    """A queued job is cancelled at once; a working one stops at its next step."""
    now = timezone.now()
    if RetrainJob.objects.filter(pk=job.pk, state=JobState.QUEUED).update(
        state=JobState.CANCELLED, finished_at=now, cancel_requested=True
    ):
        # Its reservation stops counting with the active state; released_at says when.
        GpuPlacement.objects.filter(job=job, released_at__isnull=True).update(released_at=now)
        job_log(job.pk, "cancelled while queued")
    elif RetrainJob.objects.filter(pk=job.pk, state__in=ACTIVE_STATES, cancel_requested=False).update(
        cancel_requested=True
    ):
        job_log(job.pk, "cancel requested: the worker stops at its next heartbeat")
    job.refresh_from_db()
    return job


def jobs_from_alerts(*, now: datetime | None = None) -> int:
    """The beat tick: a job for each open accuracy alert whose policy auto-retrains, unless a job
    is active, the model's retrain cooldown is running, the alert already led to a decided
    challenger (promoted, waiting, rejected or rolled back by a person), or the window that raised
    it is unusable for training."""
    now = now or timezone.now()
    created = 0
    alerts = Alert.objects.filter(kind__in=retrain_alert_kinds()).exclude(state=AlertState.RESOLVED)
    for alert in alerts.select_related("model", "opened_by", "last_check"):
        if _alert_should_retrain(alert, now):
            try:
                job_request(model=alert.model, trigger=Trigger.ALERT, alert=alert)
                created += 1
            except JobAlreadyActive:
                continue
    return created


def _alert_should_retrain(alert: Alert, now: datetime) -> bool:
    if not policy_for(alert.model).auto_retrain:
        return False
    if RetrainJob.objects.filter(alert=alert, decision__in=HUMAN_OR_WAITING).exists():
        return False  # a person decided on this alert's challenger, or one waits for them
    check = alert.last_check or alert.opened_by
    if check is None or not decisions_read(check.decisions).usable_for_training:
        return False
    if not _breach_is_news(alert, check):
        return False
    cooldown = timedelta(minutes=retrain_policy_for(alert.model).cooldown_minutes)
    recent = RetrainJob.objects.filter(
        model=alert.model, trigger=Trigger.ALERT, created_at__gt=now - cooldown
    )
    return (
        not recent.exists()
        and not RetrainJob.objects.filter(Q(model=alert.model) & Q(state__in=ACTIVE_STATES)).exists()
    )


def _breach_is_news(alert: Alert, check: QualityCheck) -> bool:
    """After this alert's job promoted a champion, only a later check of that champion that still
    breaches (the alert is still open) justifies another job: the new model must show it too."""
    promoted = (
        RetrainJob.objects.filter(alert=alert, decision=Decision.PROMOTED).order_by("-decided_at").first()
    )
    if promoted is None:
        return True
    fresh = (
        check.finished_at is not None
        and promoted.decided_at is not None
        and check.finished_at > promoted.decided_at
    )
    return (
        fresh
        and check.version_id == promoted.result_version_id
        and decisions_read(check.decisions).verdict("accuracy_drop") is True
    )
