"""Who may compute a check: its task (and that task's redelivery), or anyone once it is stale."""

from datetime import timedelta

import pytest
from django.test import override_settings
from django.utils import timezone

from monitoring.checks import _compute_into, quality_check_run
from monitoring.models import Alert, CheckState, MonitoringPolicy, QualityCheck
from monitoring.window import scheduled_window
from registry.models import RegisteredModel
from tests.clock import T0
from tests.platform.monitoring.factories import monitored_model, rows, send

END = T0 + timedelta(hours=1)


def _window(model: RegisteredModel):  # type: ignore[no-untyped-def]
    return scheduled_window(MonitoringPolicy.objects.get(model=model), END)


def _left_running(model: RegisteredModel, *, owner: str, age: timedelta = timedelta(0)) -> QualityCheck:
    """The row a worker killed mid-check leaves behind."""
    window = _window(model)
    return QualityCheck.objects.create(
        model=model,
        window_spec=window.spec,
        window_start=END,
        window_end=END,
        state=CheckState.RUNNING,
        started_at=timezone.now() - age,
        attempts=1,
        owner=owner,
    )


@pytest.fixture
def model(db: None) -> RegisteredModel:
    model = monitored_model()
    send(model, rows(500, seed=2, shift=2.0), start=T0, prefix="a")  # drifted: opens an alert
    return model


def test_a_redelivery_of_the_same_task_takes_over_its_running_row_at_once(model: RegisteredModel) -> None:
    row = _left_running(model, owner="task-1")
    quality_check_run(model_id=model.pk, window=_window(model), owner="task-1")
    row.refresh_from_db()
    assert (row.state, row.attempts) == (CheckState.DONE, 2)


def test_another_task_leaves_a_fresh_running_row_alone(model: RegisteredModel) -> None:
    row = _left_running(model, owner="task-1")
    quality_check_run(model_id=model.pk, window=_window(model), owner="task-2")
    row.refresh_from_db()
    assert (row.state, row.attempts, row.owner) == (CheckState.RUNNING, 1, "task-1")


@override_settings(DRIFTWATCH_CHECK_STALE_SECONDS=60)
def test_any_task_takes_over_a_row_older_than_the_staleness_setting(model: RegisteredModel) -> None:
    row = _left_running(model, owner="task-1", age=timedelta(minutes=2))
    quality_check_run(model_id=model.pk, window=_window(model), owner="task-2")
    row.refresh_from_db()
    assert (row.state, row.owner) == (CheckState.DONE, "task-2")


def test_an_attempt_overtaken_by_a_redelivery_stores_nothing_and_alerts_nothing(
    model: RegisteredModel,
) -> None:
    row = _left_running(model, owner="task-1")
    QualityCheck.objects.filter(pk=row.pk).update(attempts=2)  # a redelivery took it over meanwhile
    _compute_into(row, model, _window(model))
    row.refresh_from_db()
    assert (row.state, row.n_samples) == (CheckState.RUNNING, 0)
    assert not Alert.objects.filter(model=model).exists()


def test_the_same_task_delivered_again_after_it_finished_changes_nothing(model: RegisteredModel) -> None:
    row = _left_running(model, owner="task-1")
    quality_check_run(model_id=model.pk, window=_window(model), owner="task-1")
    quality_check_run(model_id=model.pk, window=_window(model), owner="task-1")  # delivered again
    row.refresh_from_db()
    assert (row.state, row.attempts) == (CheckState.DONE, 2)
    assert Alert.objects.filter(model=model, kind="data_drift").count() == 1
