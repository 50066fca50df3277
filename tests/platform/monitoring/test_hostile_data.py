"""Data that used to break every later check: ancient timestamps, a reference without
probabilities, features named like the window's own columns."""

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from rest_framework.test import APIClient

from monitoring.checks import quality_check_run
from monitoring.models import CheckState, MonitoringPolicy, PredictionSample
from monitoring.window import scheduled_window
from registry.models import RegisteredModel
from registry.services import reference_upload
from tests.clock import T0, at, iso
from tests.platform.conftest import FEATURES, make_sample
from tests.platform.monitoring.factories import monitored_model, rows, send


@pytest.mark.parametrize(
    "timestamp", [iso(datetime.min.replace(tzinfo=UTC)), iso(datetime.fromtimestamp(-1, UTC)), -1]
)
def test_timestamps_before_1970_are_refused_at_ingest(
    ingest: APIClient, churn: RegisteredModel, timestamp: Any
) -> None:
    response = ingest.post(
        "/api/v1/models/churn/predictions", {"samples": [make_sample(0, timestamp=timestamp)]}, format="json"
    )
    assert response.status_code == 400
    assert response.json()["errors"][0]["field"] == "timestamp"
    assert not PredictionSample.objects.exists()


def test_timestamps_are_stored_in_utc(ingest: APIClient, churn: RegisteredModel) -> None:
    sample = make_sample(0, timestamp=iso(at(hours=4).replace(tzinfo=timezone(timedelta(hours=14)))))
    ingest.post("/api/v1/models/churn/predictions", {"samples": [sample]}, format="json")
    stored = PredictionSample.objects.get()
    assert stored.timestamp == at(hours=4 - 14)


def test_reference_without_probabilities_leaves_the_estimate_unavailable_with_its_reason(
    db: None,
) -> None:
    model = monitored_model(reference_rows=10)
    plain = [{k: v for k, v in r.items() if k != "probabilities"} for r in rows(300, seed=1)]
    reference_upload(model=model, rows=plain)
    send(model, rows(300, seed=2, shift=1.0), start=T0, prefix="a")
    policy = MonitoringPolicy.objects.get(model=model)
    check = quality_check_run(model_id=model.pk, window=scheduled_window(policy, T0 + timedelta(hours=1)))
    assert check is not None and check.state == CheckState.DONE, check.error if check else None
    assert check.metrics["accuracy"] > 0.5
    assert check.drift["columns"]
    assert check.estimated["value"] is None
    assert check.estimated["available"] is False
    assert "no probabilities" in check.estimated["reason"]


@pytest.mark.parametrize("name", ["timestamp", "sample_id", "version_id", "label_received_at", "__label__"])
def test_features_named_like_the_window_columns_are_refused(ingest: APIClient, name: str) -> None:
    features = [*FEATURES, {"name": name, "type": "numerical"}]
    body = {"name": "m", "task": "classification", "features": features, "classes": ["no", "yes"]}
    response = ingest.post("/api/v1/models", body, format="json")
    assert response.status_code == 400
    assert response.json()["errors"][0]["row"] == 3
    assert response.json()["errors"][0]["field"] == "features.name"
    assert not RegisteredModel.objects.exists()
