"""The retraining tasks through the task wrapper: a transient error is retried, a permanent one
fails the job for good with its reason (the services are tested in tests/platform/retraining)."""

from typing import Any

import pytest
from django.db import OperationalError

from retraining import execution
from retraining import placement as placement_service
from retraining.inputs import DataError
from retraining.models import JobState
from retraining.placement import jobs_place
from retraining.requests import job_request
from tests.platform.retraining.test_gpu_fleet import drifted, placement, sims
from workers.tasks.base import METRIC_HOOKS, TaskEvent
from workers.tasks.retraining import place_retrain_jobs, run_retrain_job

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
    model = drifted("m")  # slow on a loaded machine: the device reports after it, so it is live
    sims("node-a", 24)
    job = job_request(model=model, trigger="api")
    monkeypatch.setattr(placement_service, "training_data", Blips(OperationalError("connection reset"), 1))
    with pytest.raises(OperationalError):
        jobs_place()
    job.refresh_from_db()
    assert job.state == JobState.QUEUED and job.error == ""
    assert placement(job).need_bytes is None and placement(job).device is None


def test_the_place_task_retries_a_database_blip_and_then_places_the_job(monkeypatch: Any) -> None:
    model = drifted("m")  # slow on a loaded machine: the device reports after it, so it is live
    sims("node-a", 24)
    job = job_request(model=model, trigger="api")
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
    model = drifted("m")  # slow on a loaded machine: the device reports after it, so it is live
    sims("node-a", 24)
    job = job_request(model=model, trigger="api")
    blips = Blips(ValueError("recipe 'mlp': hidden must be a list of integers"), 5)
    monkeypatch.setattr(placement_service, "training_data", blips)
    result = place_retrain_jobs.apply()
    assert result.successful() and result.result == 0 and blips.calls == 1
    job.refresh_from_db()
    assert job.state == JobState.FAILED
    assert job.error == "ValueError: recipe 'mlp': hidden must be a list of integers"


def test_a_transient_error_past_max_retries_fails_the_task(monkeypatch: Any) -> None:
    model = drifted("m")  # slow on a loaded machine: the device reports after it, so it is live
    sims("node-a", 24)
    job = job_request(model=model, trigger="api")
    blips = Blips(OperationalError("database is locked"), 100)
    monkeypatch.setattr(placement_service, "training_data", blips)
    result = place_retrain_jobs.apply()
    assert isinstance(result.result, OperationalError)
    assert blips.calls == place_retrain_jobs.max_retries + 1
    job.refresh_from_db()
    assert job.state == JobState.QUEUED  # the next beat round sizes it again


class TrainingDataBlips(Blips):
    def __init__(self, error: Exception, times: int) -> None:
        super().__init__(error, times)
        self.real = execution.training_data


def test_a_database_blip_while_a_job_runs_requeues_it_and_the_next_run_succeeds(monkeypatch: Any) -> None:
    job = job_request(model=drifted("m"), trigger="api")  # no live GPU: straight to a CPU worker
    blips = TrainingDataBlips(OperationalError("terminating connection due to administrator command"), 1)
    monkeypatch.setattr(execution, "training_data", blips)
    assert run_retrain_job.apply(args=[job.pk]).result == JobState.QUEUED
    job.refresh_from_db()
    assert job.state == JobState.QUEUED and job.error == "" and "re-queued" in job.log
    token = placement(job).token
    assert run_retrain_job.apply(args=[job.pk, token]).result == JobState.SUCCEEDED
    assert blips.calls == 2


def test_a_job_whose_data_is_bad_fails_for_good_with_its_reason(monkeypatch: Any) -> None:
    job = job_request(model=drifted("m"), trigger="api")
    monkeypatch.setattr(
        execution, "training_data", TrainingDataBlips(DataError("12 usable labelled samples"), 9)
    )
    assert run_retrain_job.apply(args=[job.pk]).result == JobState.FAILED
    job.refresh_from_db()
    assert job.error == "DataError: 12 usable labelled samples"
