"""Beat → worker → database, for real: celery beat (DatabaseScheduler) and a Celery worker run in
threads on the configured broker (Redis in CI) and database (PostgreSQL in CI). Only the clock
that decides which window is due is ours to move, so the test needs no minutes of waiting."""

import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection
from django_celery_beat.models import IntervalSchedule, PeriodicTask

from monitoring import scheduling
from monitoring.models import Alert, QualityCheck
from monitoring.scheduling import beat_schedule_ensure
from tests.platform.monitoring.factories import monitored_model, rows, send


class Clock:
    def __init__(self, now: datetime) -> None:
        self.value = now

    def now(self) -> datetime:
        return self.value


@pytest.fixture
def beat(transactional_db: None) -> Iterator[None]:
    from celery.beat import Service

    from workers.celery_app import app

    beat_schedule_ensure()
    every_second, _ = IntervalSchedule.objects.get_or_create(every=1, period=IntervalSchedule.SECONDS)
    PeriodicTask.objects.filter(task="driftwatch.checks.run_due").update(interval=every_second)
    service = Service(app, scheduler_cls="django_celery_beat.schedulers:DatabaseScheduler", max_interval=1)
    thread = threading.Thread(target=service.start, daemon=True)
    thread.start()
    yield
    service.stop()
    thread.join(timeout=10)


def wait_for(condition: Callable[[], Any], timeout: float = 90) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        connection.close()  # see other threads' commits with a fresh connection
        time.sleep(0.5)
    raise AssertionError("timed out waiting for the pipeline")


@pytest.mark.slow
def test_drift_is_caught_end_to_end_through_beat_worker_and_database(
    celery_worker: object, beat: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    t0 = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(hours=1)
    clock = Clock(t0 + timedelta(seconds=10))
    monkeypatch.setattr(scheduling, "timezone", clock)
    model = monitored_model(check_every_minutes=1, window_size=500)
    send(model, rows(500, seed=2), start=t0 - timedelta(minutes=30), prefix="good")

    first = wait_for(lambda: QualityCheck.objects.filter(model=model, state="done").first())
    assert first.window_end == t0 and first.decisions["accuracy_drop"] is False

    send(
        model,
        rows(500, seed=3, shift=1.0, flip=0.45),
        start=t0 + timedelta(seconds=20),
        prefix="bad",
        step=timedelta(milliseconds=50),
    )
    clock.value = t0 + timedelta(minutes=1, seconds=10)
    alert = wait_for(lambda: Alert.objects.filter(model=model, kind="accuracy_drop").first())
    clock.value = t0 + timedelta(minutes=2, seconds=10)
    wait_for(lambda: QualityCheck.objects.filter(model=model, state="done").count() >= 3)

    checks = list(QualityCheck.objects.filter(model=model).order_by("window_end"))
    accuracies = [c.metrics["accuracy"] for c in checks]
    assert accuracies[0] - accuracies[1] > 0.2, accuracies
    assert alert.opened_by_id == checks[1].pk
    assert Alert.objects.filter(model=model, kind="accuracy_drop").count() == 1
