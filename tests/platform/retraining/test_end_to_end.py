"""Drift → alert → job → challenger → gate → champion, through celery beat (DatabaseScheduler) and
real Celery workers on the configured broker and database (PostgreSQL + Redis in CI).

Only the monitoring scheduler's clock is moved, as in the monitoring end-to-end test."""

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.files.storage import default_storage
from django.db import connection
from django.utils import timezone
from django_celery_beat.models import IntervalSchedule, PeriodicTask
from rest_framework.test import APIClient

from core.services import api_token_create
from monitoring import scheduling as monitoring_scheduling
from monitoring.models import Alert, MonitoringPolicy, QualityCheck
from retraining.checkpoints import JobCheckpoints
from retraining.models import Decision, JobState, RetrainJob, RetrainPolicy
from retraining.requests import job_request
from retraining.scheduling import jobs_reap_stale
from tests.platform.retraining.factories import RECIPE, drifted_model, retrainable_model, serve
from tests.workers.training.texts import TEXT_FEATURES, TEXT_RECIPE, reviews
from workers.training.artifacts import Predictor

ROOT = Path(__file__).resolve().parents[3]


class Clock:
    def __init__(self, now: datetime) -> None:
        self.value = now

    def now(self) -> datetime:
        return self.value


def wait_for(
    condition: Callable[[], Any], timeout: float = 180, logs: Sequence[Path] = (), poll: float = 0.5
) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        connection.close()  # see other threads' and processes' commits
        time.sleep(poll)
    tails = "\n".join(p.read_text(errors="replace")[-3000:] for p in logs if p.exists())
    raise AssertionError(f"timed out waiting for the pipeline\n{tails}")


@pytest.fixture
def worker(transactional_db: None) -> Iterator[object]:
    """A real Celery worker (solo pool, in a thread) on checks, default and training."""
    from celery.contrib.testing.worker import start_worker

    from workers import queues
    from workers.celery_app import app

    app.control.purge()
    with start_worker(app, pool="solo", perform_ping_check=False, shutdown_timeout=60,
                      queues=[queues.DEFAULT, queues.CHECKS, queues.TRAINING]) as w:  # fmt: skip
        yield w


@pytest.fixture
def beat(transactional_db: None) -> Iterator[Callable[[], None]]:
    """Starts celery beat when called (after the test's first data is in)."""
    from celery.beat import Service

    from monitoring.scheduling import beat_schedule_ensure as monitoring_beat
    from retraining.scheduling import beat_schedule_ensure as retraining_beat
    from workers.celery_app import app

    monitoring_beat()
    retraining_beat()
    every_second, _ = IntervalSchedule.objects.get_or_create(every=1, period=IntervalSchedule.SECONDS)
    PeriodicTask.objects.filter(
        task__in=["driftwatch.checks.run_due", "driftwatch.retraining.jobs_from_alerts"]
    ).update(interval=every_second)
    service = Service(app, scheduler_cls="django_celery_beat.schedulers:DatabaseScheduler", max_interval=1)
    thread = threading.Thread(target=service.start, daemon=True)
    yield thread.start
    service.stop()
    if thread.is_alive():
        thread.join(timeout=10)


def download_champion(model_name: str) -> Predictor:
    """What a serving system does after the webhook: fetch the champion through the API."""
    user, _ = get_user_model().objects.get_or_create(username="serving")
    _, secret = api_token_create(user=user, scope="read")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    response = client.get(f"/api/v1/models/{model_name}/champion/artifact")
    assert response.status_code == 200
    return Predictor.from_bytes(b"".join(response.streaming_content))


@pytest.mark.slow
def test_drift_alert_retrains_promotes_and_accuracy_recovers(
    worker: object, beat: Callable[[], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    t0 = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(hours=1)
    clock = Clock(t0 + timedelta(seconds=10))
    monkeypatch.setattr(monitoring_scheduling, "timezone", clock)
    model = retrainable_model(check_every_minutes=1, auto_retrain=True)
    RetrainPolicy.objects.filter(model=model).update(max_training_samples=600, cooldown_minutes=0)
    serve(model, 600, concept=0, seed=20, start=t0 - timedelta(minutes=30), prefix="pre")
    beat()
    before = wait_for(lambda: QualityCheck.objects.filter(model=model, state="done").first())
    assert before.decisions["accuracy_drop"] is False

    serve(model, 600, concept=1, seed=21, start=t0 + timedelta(seconds=20), prefix="drift",
          step=timedelta(milliseconds=50))  # fmt: skip
    clock.value = t0 + timedelta(minutes=1, seconds=10)
    alert = wait_for(lambda: Alert.objects.filter(model=model, kind="accuracy_drop").first())
    job = wait_for(lambda: RetrainJob.objects.filter(model=model, decision=Decision.PROMOTED).first())

    assert job.alert_id == alert.pk and job.trigger == "alert"
    assert job.state == JobState.SUCCEEDED and job.plan["batch_size"] > 0
    assert job.estimated_peak_bytes and job.measured_peak_bytes
    predictor = download_champion(model.name)
    serve(model, 600, concept=1, seed=22, start=t0 + timedelta(minutes=1, seconds=20), prefix="after",
          step=timedelta(milliseconds=50), predictor=predictor)  # fmt: skip
    clock.value = t0 + timedelta(minutes=2, seconds=10)
    after = wait_for(
        lambda: QualityCheck.objects.filter(
            model=model, state="done", window_end=t0 + timedelta(minutes=2)
        ).first()
    )
    drifted = QualityCheck.objects.get(model=model, window_end=t0 + timedelta(minutes=1))
    assert drifted.metrics["accuracy"] < before.metrics["accuracy"] - 0.2
    assert abs(after.metrics["accuracy"] - before.metrics["accuracy"]) <= 0.05, (
        before.metrics,
        after.metrics,
    )
    assert after.version_id == job.result_version_id


@pytest.mark.slow
def test_a_drifted_text_model_is_fine_tuned_from_its_champion_gated_and_promoted(
    worker: object, beat: Callable[[], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The issue 23 "done when": a tiny transformer on texts, retrained by a real worker from a
    drift alert, starting from the champion's weights, through the gate to champion."""
    t0 = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(hours=1)
    clock = Clock(t0 + timedelta(seconds=10))
    monkeypatch.setattr(monitoring_scheduling, "timezone", clock)
    recipe = replace(TEXT_RECIPE, epochs=8, learning_rate=5e-3)
    texts: dict[str, Any] = {"features": TEXT_FEATURES, "frame_of": reviews}
    model = retrainable_model("reviews", recipe=recipe, champion_recipe=recipe, check_every_minutes=1,
                              auto_retrain=True, **texts)  # fmt: skip
    RetrainPolicy.objects.filter(model=model).update(max_training_samples=600, cooldown_minutes=0)
    serve(model, 600, concept=0, seed=20, start=t0 - timedelta(minutes=30), prefix="pre", frame_of=reviews)
    beat()
    before = wait_for(lambda: QualityCheck.objects.filter(model=model, state="done").first())
    assert before.decisions["accuracy_drop"] is False

    serve(model, 600, concept=1, seed=21, start=t0 + timedelta(seconds=20), prefix="drift",
          step=timedelta(milliseconds=50), frame_of=reviews)  # fmt: skip
    clock.value = t0 + timedelta(minutes=1, seconds=10)
    alert = wait_for(lambda: Alert.objects.filter(model=model, kind="accuracy_drop").first())
    job = wait_for(lambda: RetrainJob.objects.filter(model=model, decision=Decision.PROMOTED).first())

    assert job.alert_id == alert.pk and job.trigger == "alert" and job.state == JobState.SUCCEEDED
    assert "fine-tuning from the champion" in job.log, job.log
    assert job.gate["passed"] and job.plan["batch_size"] > 0 and job.plan["longest_input"] > 0
    assert "longest input in the data" in job.plan["reasoning"]
    promoted = download_champion(model.name)
    assert promoted.bundle.adapter.kind == "tokenizer"
    test, truth = reviews(300, seed=30, concept=1)
    predictions, _ = promoted.predict(test)
    assert sum(p == y for p, y in zip(predictions, truth, strict=True)) / len(truth) > 0.8


def _worker_process(log: Path) -> subprocess.Popen[bytes]:
    """A separate training worker process on the test database, killable with SIGKILL."""
    settings = connection.settings_dict
    if connection.vendor == "postgresql":
        url = f"postgres://{settings['USER']}@{settings['HOST']}:{settings['PORT']}/{settings['NAME']}"
    else:
        url = f"sqlite:///{settings['NAME']}"
    env = {**os.environ, "DATABASE_URL": url, "DRIFTWATCH_RETRAIN_HEARTBEAT_SECONDS": "1"}
    command = [sys.executable, "-m", "celery", "-A", "workers.celery_app", "worker", "-Q", "training",
               "-P", "solo", "--without-gossip", "--without-mingle", "-l", "info"]  # fmt: skip
    return subprocess.Popen(command, cwd=ROOT, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT)


@pytest.mark.slow
def test_a_killed_training_worker_is_reaped_and_the_job_completes(
    transactional_db: None, tmp_path: Path
) -> None:
    from workers.celery_app import app

    app.control.purge()
    # 400 epochs of this MLP take about 2 s on an idle machine. The first worker is stopped (SIGSTOP,
    # at once, from the poll that sees it) as soon as its first checkpoint is stored, so it cannot
    # finish however fast it runs, then killed: no race on the machine's speed or load.
    slow = replace(RECIPE, epochs=400, early_stopping_patience=0)
    model = drifted_model(recipe=slow)
    first = _worker_process(tmp_path / "worker1.log")
    try:
        job = job_request(model=model, trigger="admin")
        checkpoint = JobCheckpoints(job).path

        def checkpointed() -> bool:
            # Swapped in whole: written beside as .new, then copied over, then .new removed.
            if not default_storage.exists(checkpoint) or default_storage.exists(f"{checkpoint}.new"):
                return False
            first.send_signal(signal.SIGSTOP)
            return True

        wait_for(checkpointed, poll=0.02)
        assert RetrainJob.objects.filter(pk=job.pk, state=JobState.RUNNING).exists()
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
    finally:
        first.kill()
    job.refresh_from_db()  # the solo worker is dead (waited for above): nothing can move the job now
    assert job.state == JobState.RUNNING  # a hard kill skips every finally: only the reaper helps
    assert jobs_reap_stale(now=timezone.now() + timedelta(minutes=10)) == 1
    second = _worker_process(tmp_path / "worker2.log")
    try:
        done = wait_for(
            lambda: RetrainJob.objects.filter(pk=job.pk, state=JobState.SUCCEEDED).first(),
            timeout=900,  # 400 epochs: about 2 s idle; torch's threads spin for minutes on an oversubscribed machine
            logs=[tmp_path / "worker2.log"],
        )
    finally:
        second.terminate()
        try:
            second.wait(timeout=60)
        except subprocess.TimeoutExpired:  # a warm shutdown waits for its task: leave no worker behind
            second.kill()
            second.wait(timeout=30)
    assert done.attempts == 2 and "re-queued" in done.log, done.log
    assert "resumed from the checkpoint at step" in done.log, done.log  # not started over
    assert done.decision == Decision.PROMOTED
    assert MonitoringPolicy.objects.filter(model=model).exists()
