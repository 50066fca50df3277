"""Retraining reads a stored check through the one typed reader: the retrain trigger and the
training data treat a check alike, including one stored without ``usable_for_training``."""

from datetime import datetime, timedelta

import pytest
from django.utils import timezone

from monitoring.alert_kinds import ALERT_KINDS, alert_kind_retrains
from monitoring.alerts import alerts_evaluate
from monitoring.models import Alert, AlertKind, MonitoringPolicy, QualityCheck
from monitoring.selectors import policy_for
from monitoring.services import labels_ingest, predictions_ingest
from registry.models import RegisteredModel
from retraining.inputs import training_data
from retraining.models import RetrainJob, RetrainPolicy
from retraining.requests import jobs_from_alerts
from retraining.selectors import retrain_policy_for
from tests.platform.conftest import make_model, make_sample

pytestmark = pytest.mark.django_db


def _hour() -> datetime:
    return timezone.now().replace(minute=0, second=0, microsecond=0)


def _served(model: RegisteredModel, n: int, *, start: datetime, prefix: str) -> None:
    samples = [
        make_sample(i, id=f"{prefix}{i}", timestamp=(start + timedelta(seconds=i)).isoformat())
        for i in range(n)
    ]
    predictions_ingest(model=model, body={"samples": samples})
    labels = [{"id": f"{prefix}{i}", "label": ["no", "yes"][i % 2]} for i in range(n)]
    labels_ingest(model=model, body={"labels": labels})


def _checked(model: RegisteredModel, *, start: datetime, decisions: dict[str, object]) -> QualityCheck:
    return QualityCheck.objects.create(
        model=model, window_spec="1h", window_start=start, window_end=start + timedelta(hours=1),
        state="done", started_at=start, finished_at=start + timedelta(hours=1), decisions=decisions,
    )  # fmt: skip


def _alert_on(check: QualityCheck, kind: str = AlertKind.ACCURACY_DROP) -> Alert:
    return Alert.objects.create(
        model=check.model,
        kind=kind,
        message="drop",
        opened_by=check,
        last_check=check,
        opened_at=check.window_end,
    )


def _model() -> RegisteredModel:
    model = make_model()
    MonitoringPolicy.objects.update_or_create(
        model=model, defaults={"auto_retrain": True, "cooldown_minutes": 0}
    )
    RetrainPolicy.objects.update_or_create(model=model, defaults={"min_training_samples": 10})
    return model


@pytest.mark.parametrize(
    ("decisions", "usable"),
    [
        ({"accuracy_drop": True}, False),  # stored without the key: the one documented default
        ({"accuracy_drop": True, "usable_for_training": False}, False),
        ({"accuracy_drop": True, "usable_for_training": True}, True),
    ],
)
def test_the_retrain_trigger_and_the_training_data_agree_on_a_checks_usability(
    decisions: dict[str, object], usable: bool
) -> None:
    model = _model()
    hour = _hour()
    _served(model, 40, start=hour - timedelta(hours=3), prefix="before")  # no check: always used
    _served(model, 30, start=hour - timedelta(hours=2), prefix="checked")
    check = _checked(model, start=hour - timedelta(hours=2), decisions=decisions)
    _alert_on(check)
    rows = training_data(model, retrain_policy_for(model), now=timezone.now())
    trained_on = {s for s in [*rows.split.train["sample_id"], *rows.split.holdout["sample_id"]]}
    checked_rows_used = any(s.startswith("checked") for s in trained_on)
    job_requested = jobs_from_alerts() == 1
    assert checked_rows_used is job_requested is usable
    assert {s for s in trained_on if s.startswith("before")} == {f"before{i}" for i in range(40)}


def test_every_alert_kind_is_a_check_decision_and_every_choice_has_a_spec() -> None:
    from workers.drift.result import DECISION_KINDS

    assert set(ALERT_KINDS) == set(AlertKind.values) == set(DECISION_KINDS)
    with pytest.raises(KeyError):
        alert_kind_retrains("accuracy_dorp")


@pytest.mark.parametrize("kind", list(AlertKind.values))
def test_an_alert_records_a_retrain_request_exactly_when_the_beat_tick_retrains_on_it(kind: str) -> None:
    model = _model()
    MonitoringPolicy.objects.filter(model=model).update(alert_k=1, alert_n=1)
    hour = _hour()
    _served(model, 30, start=hour - timedelta(hours=2), prefix="w")
    decisions = {**{k: False for k in ALERT_KINDS}, kind: True, "usable_for_training": True,
                 "metric": "accuracy", "value": 0.5, "baseline": 0.9, "tolerance": 0.05}  # fmt: skip
    check = _checked(model, start=hour - timedelta(hours=2), decisions=decisions)
    (alert,) = alerts_evaluate(check=check, policy=policy_for(model)).opened
    assert alert.kind == kind
    jobs = jobs_from_alerts()
    assert alert.details["retrain_requested"] is (jobs == 1) is alert_kind_retrains(kind)
    assert RetrainJob.objects.filter(alert=alert).exists() is alert_kind_retrains(kind)
