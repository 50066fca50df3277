"""The beat side: which checks are due, the reaper, and the beat rows themselves."""

import logging
from datetime import UTC, datetime, timedelta

from django.db.models import Q
from django.utils import timezone

from core.beat import BeatTasks, beat_rows_ensure
from core.enqueue import enqueue
from monitoring.checks import MAX_ATTEMPTS, stale_after
from monitoring.models import CheckState, MonitoringPolicy, QualityCheck
from monitoring.services import policy_ensure
from monitoring.window import scheduled_window
from registry.models import RegisteredModel
from workers import queues

logger = logging.getLogger(__name__)

BEAT_TASKS: BeatTasks = {
    # name of the beat row: (task name, period in seconds)
    "driftwatch: dispatch due checks": (queues.CHECKS_RUN_DUE, 60),
    "driftwatch: reap stuck checks": (queues.CHECKS_REAP_STUCK, 300),
    "driftwatch: refresh checks with late labels": (queues.CHECKS_REFRESH_LABELS, 600),
    "driftwatch: re-send messages the broker refused": (queues.OUTBOX_FLUSH, 30),
    # The columnar store.
    "driftwatch: compact sample parts": (queues.PARTS_COMPACT, 600),
    "driftwatch: delete orphaned sample parts": (queues.PARTS_COLLECT, 3600),
    "driftwatch: drop payloads past retention": (queues.PAYLOADS_EXPIRE, 3600),
}


def window_end_for(policy: MonitoringPolicy, now: datetime) -> datetime:
    """Windows end on multiples of the check period (epoch-aligned), so re-dispatches coincide."""
    period = max(policy.check_every_minutes, 1) * 60
    return datetime.fromtimestamp(int(now.timestamp()) // period * period, tz=UTC)


def checks_dispatch_due(*, now: datetime | None = None) -> int:
    """Claim each due policy by compare-and-set on next_check_at, then enqueue its check."""
    now = now or timezone.now()
    for model in RegisteredModel.objects.filter(policy__isnull=True):
        policy_ensure(model=model)  # every model is monitored by default
    due = MonitoringPolicy.objects.filter(enabled=True).filter(
        Q(next_check_at__isnull=True) | Q(next_check_at__lte=now)
    )
    dispatched = 0
    for policy in due:
        end = window_end_for(policy, now)
        following = end + timedelta(minutes=max(policy.check_every_minutes, 1))
        claimed = MonitoringPolicy.objects.filter(pk=policy.pk, next_check_at=policy.next_check_at).update(
            next_check_at=following
        )
        if claimed != 1:
            continue  # another beat tick got there first
        window = scheduled_window(policy, end)
        expires = max(60, policy.check_every_minutes * 60)
        enqueue(queues.CHECK_MODEL, args=[policy.model_id, window.spec, end.isoformat()], expires=expires)
        logger.info(
            "check dispatched: model=%s window=%s end=%s", policy.model_id, window.spec, end.isoformat()
        )
        dispatched += 1
    return dispatched


def checks_reap_stuck(*, now: datetime | None = None) -> int:
    """Re-enqueue checks stuck in running (their worker died) or queued (their message was lost);
    the task re-claims them by CAS."""
    now = now or timezone.now()
    stuck = QualityCheck.objects.filter(
        state__in=[CheckState.RUNNING, CheckState.QUEUED], started_at__lt=now - stale_after()
    )
    count = 0
    for check in stuck:
        if check.attempts >= MAX_ATTEMPTS:
            QualityCheck.objects.filter(pk=check.pk, state=CheckState.RUNNING).update(
                state=CheckState.FAILED, error=f"gave up after {check.attempts} attempts", finished_at=now
            )
            logger.warning(
                "reaper: check=%s model=%s given up after %s attempts",
                check.pk,
                check.model_id,
                check.attempts,
            )
            continue
        enqueue(queues.CHECK_MODEL, args=[check.model_id, check.window_spec, check.window_end.isoformat()])
        logger.warning(
            "reaper: check=%s model=%s stuck in %s, re-enqueued", check.pk, check.model_id, check.state
        )
        count += 1
    return count


def beat_schedule_ensure() -> None:
    """Create (or repair) the beat rows; editable in the admin afterwards, never duplicated."""
    beat_rows_ensure(BEAT_TASKS)
