"""Beat side of retraining: jobs from alerts, and the reaper for jobs whose worker died."""

import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from core.beat import BeatTasks, beat_rows_ensure
from retraining.checkpoints import JobCheckpoints
from retraining.joblog import job_log
from retraining.models import WORKING_STATES, JobState, RetrainJob
from retraining.requests import job_enqueue
from retraining.selectors import retrain_policy_for
from workers import queues

logger = logging.getLogger(__name__)

BEAT_TASKS: BeatTasks = {
    "driftwatch: retrain jobs from alerts": (queues.RETRAIN_FROM_ALERTS, 60),
    "driftwatch: reap stale retrain jobs": (queues.RETRAIN_REAP, 60),
    "driftwatch: place retrain jobs on GPUs": (queues.RETRAIN_PLACE, 15),
}


def stale_after() -> timedelta:
    return timedelta(seconds=settings.DRIFTWATCH_RETRAIN_STALE_SECONDS)


def jobs_reap_stale(*, now: datetime | None = None) -> int:
    """A working job without a heartbeat for ``stale_after()`` lost its worker (kill -9 skips
    every ``finally``): back to queued and re-enqueued, up to the policy's attempts, then failed;
    one whose cancel was requested is cancelled instead."""
    now = now or timezone.now()
    stale = RetrainJob.objects.filter(state__in=WORKING_STATES).filter(
        Q(heartbeat_at__lt=now - stale_after()) | Q(heartbeat_at__isnull=True)
    )
    requeued = 0
    for job in stale.select_related("model"):
        limit = retrain_policy_for(job.model).max_attempts
        claim = RetrainJob.objects.filter(pk=job.pk, state=job.state, heartbeat_at=job.heartbeat_at)
        if job.cancel_requested:  # its worker died before it could stop: it stays stopped
            if claim.update(
                state=JobState.CANCELLED, finished_at=now, error="cancelled; its worker was lost"
            ):
                JobCheckpoints(job).delete()
                job_log(job.pk, f"no heartbeat since {job.heartbeat_at}; cancel was requested → cancelled")
            continue
        if job.attempts >= limit:
            if claim.update(
                state=JobState.FAILED, finished_at=now, error=f"worker lost {job.attempts} times"
            ):
                JobCheckpoints(job).delete()
                job_log(
                    job.pk, f"no heartbeat since {job.heartbeat_at}; gave up after {job.attempts} attempts"
                )
            continue
        if claim.update(state=JobState.QUEUED, heartbeat_at=now, progress={}):
            job_log(job.pk, f"no heartbeat since {job.heartbeat_at} in {job.state}: re-queued")
            job_enqueue(job)
            requeued += 1
    return requeued


def beat_schedule_ensure() -> None:
    """Create (or repair) the retraining beat rows; editable in the admin, never duplicated."""
    beat_rows_ensure(BEAT_TASKS)
