"""The dashboard tests' story: real checks and alerts made through the monitoring services."""

from datetime import datetime, timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from monitoring.checks import quality_check_run
from monitoring.models import Alert, MonitoringPolicy, QualityCheck
from monitoring.window import scheduled_window
from registry.models import RegisteredModel
from tests.clock import T0
from tests.platform.monitoring.factories import monitored_model, rows, send


def run_check(model: RegisteredModel, end: datetime) -> QualityCheck:
    policy = MonitoringPolicy.objects.get(model=model)
    check = quality_check_run(model_id=model.pk, window=scheduled_window(policy, end))
    assert check is not None
    return QualityCheck.objects.get(pk=check.pk)


@pytest.fixture
def staff(db: None) -> Client:
    user = User.objects.create_user("ops", password="pw-ops-12345", is_staff=True)
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def story(db: None) -> dict[str, Any]:
    """A good window, then a drifted one whose accuracy falls: opens accuracy and drift alerts."""
    model = monitored_model("sea", reference_rows=1000, window_size=400, min_samples=100, min_labels=100)
    send(model, rows(400, seed=2), start=T0, prefix="good")
    good = run_check(model, T0 + timedelta(hours=1))
    send(model, rows(400, seed=3, shift=1.5, flip=0.4), start=T0 + timedelta(hours=1), prefix="bad")
    bad = run_check(model, T0 + timedelta(hours=2))
    return {"model": model, "good": good, "bad": bad, "alert": Alert.objects.get(kind="accuracy_drop")}
