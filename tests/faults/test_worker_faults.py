"""A real worker process killed mid-check, and the same task message delivered twice.

The worker is `celery worker --pool prefork` in a child process on the suite's broker and test
database; kill -9 hits the pool process running the task, so the broker redelivers the same
message (acks late, reject on worker lost) and the check's owner (its task id) takes over.
"""

import os
import signal
import uuid
from collections.abc import Iterator
from datetime import timedelta
from subprocess import Popen

import pytest
from django.db import connection

from monitoring.models import (
    Alert,
    CheckState,
    MonitoringPolicy,
    Notification,
    NotificationState,
    QualityCheck,
)
from monitoring.window import scheduled_window
from registry.models import RegisteredModel
from tests.clock import T0
from tests.live import celery_worker, child_env, django_database_url, wait_until, worker_children
from tests.platform.monitoring.factories import monitored_model, rows, send
from workers.celery_app import app

END = T0 + timedelta(hours=1)
CHECK = "driftwatch.checks.check_model"


@pytest.fixture
def drifted(transactional_db: None) -> RegisteredModel:
    model = monitored_model(notify_emails="ops@example.com")
    send(model, rows(500, seed=2, shift=2.0), start=T0, prefix="a")  # drifts: opens an alert
    return model


@pytest.fixture
def worker(drifted: RegisteredModel) -> Iterator[Popen[bytes]]:
    app.control.purge()  # nothing left by earlier tests
    env = child_env(DATABASE_URL=django_database_url())
    with celery_worker(env) as proc:
        yield proc


def _check_args(model: RegisteredModel) -> list[object]:
    window = scheduled_window(MonitoringPolicy.objects.get(model=model), END)
    return [model.pk, window.spec, END.isoformat()]


def _send_check(model: RegisteredModel, task_id: str, args: list[object] | None = None) -> None:
    app.send_task(CHECK, args=args or _check_args(model), task_id=task_id, queue="checks")


def _drained() -> None:
    """Waits until everything sent to the checks queue before this call has run."""
    app.send_task("driftwatch.system.platform_info", queue="checks").get(timeout=120)


def _assert_one_finished_check_one_alert_one_delivery(model: RegisteredModel, attempts: int) -> None:
    check = QualityCheck.objects.get(model=model)
    assert (check.state, check.attempts) == (CheckState.DONE, attempts)
    assert Alert.objects.filter(model=model, kind="data_drift").count() == 1
    notes = Notification.objects.filter(alert__model=model, alert__kind="data_drift", channel="email")
    assert notes.count() == 1
    wait_until(lambda: notes.get().state == NotificationState.SENT, 60, what="notification sent")
    assert notes.get().attempts == 1


def test_the_same_check_message_delivered_twice_has_one_effect(
    drifted: RegisteredModel, worker: Popen[bytes]
) -> None:
    task_id = str(uuid.uuid4())
    _send_check(drifted, task_id)
    _send_check(drifted, task_id)
    _drained()
    _assert_one_finished_check_one_alert_one_delivery(drifted, attempts=1)


def test_the_same_notification_message_delivered_twice_is_sent_once(
    drifted: RegisteredModel, worker: Popen[bytes]
) -> None:
    _send_check(drifted, str(uuid.uuid4()))
    # The check opens the alert and its notification (a check retried under load runs after any
    # drain message): wait for the row itself.
    notes = Notification.objects.filter(alert__model=drifted, alert__kind="data_drift", channel="email")
    wait_until(notes.exists, 120, what="the alert's email notification")
    note = notes.get()
    wait_until(lambda: Notification.objects.get(pk=note.pk).state == NotificationState.SENT, 60)
    for _ in range(2):
        app.send_task("driftwatch.alerts.deliver_notification", args=[note.pk], task_id=str(uuid.uuid4()))
    app.send_task("driftwatch.system.platform_info").get(timeout=120)
    note.refresh_from_db()
    assert (note.state, note.attempts) == (NotificationState.SENT, 1)


def test_a_check_whose_worker_is_killed_mid_check_completes_once(
    drifted: RegisteredModel, worker: Popen[bytes]
) -> None:
    if connection.vendor != "postgresql":
        pytest.skip("holds the worker mid-check with a PostgreSQL table lock; CI runs it on PostgreSQL")
    import psycopg

    args = _check_args(drifted)
    # The check blocks on its policy read after claiming its row: a worker caught mid-check.
    blocker = psycopg.connect(django_database_url())
    blocker.execute("LOCK TABLE monitoring_monitoringpolicy IN ACCESS EXCLUSIVE MODE")
    try:
        _send_check(drifted, str(uuid.uuid4()), args)
        wait_until(lambda: QualityCheck.objects.filter(model=drifted, state=CheckState.RUNNING).exists(), 60)
        wait_until(lambda: bool(worker_children(worker)), 10)
        for pid in worker_children(worker):
            os.kill(pid, signal.SIGKILL)
    finally:
        blocker.rollback()
        blocker.close()
    wait_until(
        lambda: QualityCheck.objects.get(model=drifted).state == CheckState.DONE, 90, what="check taken over"
    )
    assert QualityCheck.objects.filter(model=drifted).count() == 1
    _assert_one_finished_check_one_alert_one_delivery(drifted, attempts=2)
