"""The retraining tasks through the task wrapper: a transient error is retried, a permanent one
fails the job for good with its reason (the services are tested in tests/platform/retraining)."""

from typing import Any

import pytest
from django.db import OperationalError

from retraining import placement as placement_service
from retraining.models import JobState
from retraining.placement import jobs_place
from retraining.requests import job_request
from tests.platform.retraining.test_gpu_fleet import drifted, placement, sims
from workers.tasks.base import METRIC_HOOKS, TaskEvent
from workers.tasks.retraining import place_retrain_jobs

pytestmark = pytest.mark.django_db


class Blips:
    """``training_data`` raising ``error`` on its first ``times`` calls, then the real one."""

    def __init__(self, error: Exception, times: int) -> None:
        self.error, self.times, self.calls = error, times, 0
        self.real = placement_service.training_data

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        if self.calls <= self.times:
            raise self.error
        return self.real(*args, **kwargs)


def test_a_database_blip_while_sizing_leaves_the_job_queued_and_unsized(monkeypatch: Any) -> None:
    sims("node-a", 24)
    job = job_request(model=drifted("m"), trigger="api")
    monkeypatch.setattr(placement_service, "training_data", Blips(OperationalError("connection reset"), 1))
    with pytest.raises(OperationalError):
        jobs_place()
    job.refresh_from_db()
    assert job.state == JobState.QUEUED and job.error == ""
    assert placement(job).need_bytes is None and placement(job).device is None


def test_the_place_task_retries_a_database_blip_and_then_places_the_job(monkeypatch: Any) -> None:
    sims("node-a", 24)
    job = job_request(model=drifted("m"), trigger="api")
    blips = Blips(OperationalError("server closed the connection unexpectedly"), 1)
    monkeypatch.setattr(placement_service, "training_data", blips)
    events: list[TaskEvent] = []
    METRIC_HOOKS.append(events.append)
    try:
        result = place_retrain_jobs.apply()  # eager: the retry runs at once
    finally:
        METRIC_HOOKS.remove(events.append)
    assert result.successful() and result.result == 1
    job.refresh_from_db()
    assert job.state == JobState.QUEUED and blips.calls == 2
    assert placement(job).device is not None and placement(job).need_bytes is not None
    assert [(e.name, e.outcome, e.retries) for e in events] == [
        ("driftwatch.retraining.place_jobs", "retry", 0),
        ("driftwatch.retraining.place_jobs", "ok", 1),
    ]
    assert "OperationalError" in events[0].error


def test_a_bad_recipe_while_sizing_fails_the_job_for_good_without_a_retry(monkeypatch: Any) -> None:
    sims("node-a", 24)
    job = job_request(model=drifted("m"), trigger="api")
    blips = Blips(ValueError("recipe 'mlp': hidden must be a list of integers"), 5)
    monkeypatch.setattr(placement_service, "training_data", blips)
    result = place_retrain_jobs.apply()
    assert result.successful() and result.result == 0 and blips.calls == 1
    job.refresh_from_db()
    assert job.state == JobState.FAILED
    assert job.error == "ValueError: recipe 'mlp': hidden must be a list of integers"


def test_a_transient_error_past_max_retries_fails_the_task(monkeypatch: Any) -> None:
    sims("node-a", 24)
    job = job_request(model=drifted("m"), trigger="api")
    blips = Blips(OperationalError("database is locked"), 100)
    monkeypatch.setattr(placement_service, "training_data", blips)
    result = place_retrain_jobs.apply()
    assert isinstance(result.result, OperationalError)
    assert blips.calls == place_retrain_jobs.max_retries + 1
    job.refresh_from_db()
    assert job.state == JobState.QUEUED  # the next beat round sizes it again
