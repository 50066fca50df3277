import logging
from datetime import timedelta

import pytest
from django.utils import timezone

from retraining.models import JobState, RetrainJob, RetrainPolicy
from retraining.requests import job_request
from retraining.scheduling import beat_schedule_ensure, jobs_reap_stale
from tests.platform.conftest import make_model

pytestmark = pytest.mark.django_db


def _stale_job(attempts: int, state: str = JobState.RUNNING) -> RetrainJob:
    job = job_request(model=make_model(), trigger="admin")
    RetrainJob.objects.filter(pk=job.pk).update(
        state=state, attempts=attempts, heartbeat_at=timezone.now() - timedelta(minutes=10)
    )
    return job


def test_a_job_without_heartbeat_is_requeued() -> None:
    job = _stale_job(attempts=1)
    assert jobs_reap_stale() == 1
    job.refresh_from_db()
    assert job.state == JobState.QUEUED and "re-queued" in job.log


def test_a_job_that_lost_its_worker_too_often_fails() -> None:
    job = _stale_job(attempts=3)
    RetrainPolicy.objects.filter(model=job.model).update(max_attempts=3)
    assert jobs_reap_stale() == 0
    job.refresh_from_db()
    assert job.state == JobState.FAILED and "gave up" in job.log


def test_a_fresh_heartbeat_is_left_alone() -> None:
    job = _stale_job(attempts=1)
    RetrainJob.objects.filter(pk=job.pk).update(heartbeat_at=timezone.now())
    assert jobs_reap_stale() == 0


def test_queued_jobs_are_not_reaped() -> None:
    _stale_job(attempts=0, state=JobState.QUEUED)
    assert jobs_reap_stale() == 0


def test_beat_rows_exist_once() -> None:
    from django_celery_beat.models import PeriodicTask

    beat_schedule_ensure()
    beat_schedule_ensure()
    tasks = PeriodicTask.objects.filter(task__startswith="driftwatch.retraining.")
    assert sorted(tasks.values_list("task", flat=True)) == [
        "driftwatch.retraining.jobs_from_alerts",
        "driftwatch.retraining.place_jobs",
        "driftwatch.retraining.reap_stale",
    ]


def test_the_reaper_logs_the_job_and_model_it_requeued(caplog: pytest.LogCaptureFixture) -> None:
    job = _stale_job(attempts=1)
    with caplog.at_level(logging.INFO, logger="retraining"):
        jobs_reap_stale()
    lines = [r.getMessage() for r in caplog.records if r.name == "retraining.joblog"]
    assert any(f"job={job.pk} model={job.model_id}:" in m and "re-queued" in m for m in lines), lines
