"""Following and stopping a job: per-epoch progress in the job row, and a cancel that really stops
a queued, running or orphaned job and frees what it reserved."""

import threading
import time
from dataclasses import replace
from datetime import timedelta

import pytest
from django.db import connection
from django.test import override_settings
from django.utils import timezone

from retraining.execution import job_run
from retraining.inventory import DeviceReport, devices_report, reserved_bytes
from retraining.models import GpuPlacement, JobState, RetrainJob
from retraining.placement import jobs_place
from retraining.requests import job_cancel, job_request
from retraining.scheduling import jobs_reap_stale
from tests.platform.retraining.factories import RECIPE, drifted_model, run
from workers.placement.devices import GIB

LONG = replace(RECIPE, epochs=1000, early_stopping_patience=0)  # far longer than the test waits


@pytest.mark.django_db
def test_progress_names_the_epoch_budget_and_keeps_each_epochs_losses() -> None:
    job = run(drifted_model())
    progress = job.progress
    assert progress["epochs"] == RECIPE.epochs and 1 <= progress["epoch"] <= RECIPE.epochs
    assert [row[0] for row in progress["history"]] == list(range(1, progress["epoch"] + 1))
    assert progress["history"][-1][1:] == [progress["loss"], progress["val_loss"]]
    assert all(loss > 0 and val_loss > 0 for _, loss, val_loss in progress["history"])


def _train_in_thread(job_id: int) -> None:
    try:
        job_run(job_id=job_id)
    finally:
        connection.close()  # the thread's own connection; the test database is dropped after


def _watch(job_id: int, until: float) -> RetrainJob | None:
    """The job row as soon as it is running past its first epoch (another thread trains it)."""
    while time.monotonic() < until:
        connection.close()  # a fresh connection sees the training thread's commits
        job = RetrainJob.objects.get(pk=job_id)
        if job.state == JobState.RUNNING and job.progress.get("epoch", 0) >= 1:
            return job
        time.sleep(0.05)
    return None


@pytest.mark.django_db(transaction=True)
@override_settings(DRIFTWATCH_RETRAIN_HEARTBEAT_SECONDS=0)
def test_a_running_job_cancelled_mid_training_stops_at_its_next_heartbeat() -> None:
    job = job_request(model=drifted_model(recipe=LONG), trigger="admin")
    worker = threading.Thread(target=_train_in_thread, args=[job.pk])
    worker.start()
    seen = _watch(job.pk, until=time.monotonic() + 120)
    assert seen is not None and seen.progress["epochs"] == LONG.epochs  # progress while it runs
    job_cancel(job=seen)
    worker.join(timeout=120)
    assert not worker.is_alive()
    job.refresh_from_db()
    assert job.state == JobState.CANCELLED and job.finished_at is not None
    assert job.progress["epoch"] < LONG.epochs and "cancelled at epoch" in job.error
    assert job.result_version is None and "cancel requested" in job.log


@pytest.mark.django_db
def test_cancelling_a_placed_queued_job_releases_its_gpu_reservation() -> None:
    (device,) = devices_report(host="node-a", devices=[DeviceReport(0, "sim0", 24 * GIB, 24 * GIB, True)])
    job = job_request(model=drifted_model(), trigger="admin")
    assert jobs_place() == 1 and reserved_bytes(device) > 0
    job_cancel(job=job)
    assert reserved_bytes(device) == 0
    assert GpuPlacement.objects.get(job=job).released_at is not None
    assert job_run(job_id=job.pk) == JobState.CANCELLED  # its message, delivered late, does nothing


@pytest.mark.django_db
def test_a_stale_job_whose_cancel_was_requested_is_cancelled_not_requeued() -> None:
    job = job_request(model=drifted_model(), trigger="admin")
    RetrainJob.objects.filter(pk=job.pk).update(
        state=JobState.RUNNING, heartbeat_at=timezone.now() - timedelta(hours=1), attempts=1
    )
    job_cancel(job=job)
    assert jobs_reap_stale() == 0
    job.refresh_from_db()
    assert job.state == JobState.CANCELLED and "cancel was requested" in job.log


@pytest.mark.django_db
def test_cancelling_twice_logs_one_request() -> None:
    job = job_request(model=drifted_model(), trigger="admin")
    RetrainJob.objects.filter(pk=job.pk).update(state=JobState.RUNNING)
    job_cancel(job=job)
    job = job_cancel(job=job)
    assert job.state == JobState.RUNNING and job.log.count("cancel requested") == 1


@pytest.mark.django_db(transaction=True)
@override_settings(DRIFTWATCH_RETRAIN_HEARTBEAT_SECONDS=0)
def test_deleting_the_model_of_a_running_job_stops_it_at_its_next_heartbeat() -> None:
    (device,) = devices_report(host="node-a", devices=[DeviceReport(0, "sim0", 24 * GIB, 24 * GIB, True)])
    endless = replace(RECIPE, epochs=100_000, early_stopping_patience=0)
    model = drifted_model(recipe=endless)
    job = job_request(model=model, trigger="admin")
    assert jobs_place() == 1 and reserved_bytes(device) > 0
    outcome: list[str] = []

    def train() -> None:
        try:
            outcome.append(job_run(job_id=job.pk))
        finally:
            connection.close()

    worker = threading.Thread(target=train)
    worker.start()
    assert _watch(job.pk, until=time.monotonic() + 120) is not None
    model.delete()  # what the admin's delete does: the job and its reservation go with it
    worker.join(timeout=60)
    assert not worker.is_alive(), "the worker kept training a deleted model's job"
    assert outcome == ["missing"]
    assert reserved_bytes(device) == 0 and not GpuPlacement.objects.filter(job_id=job.pk).exists()
