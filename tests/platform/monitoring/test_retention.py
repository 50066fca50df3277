"""Retention of raw payloads (policy.payload_retention_days) against the real database: the beat
task retires whole old parts for copies without their features, keeping index rows, labels and
checks; a check over a window past retention says what it ran and skipped."""

import io
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from django.core.management import call_command
from rest_framework.test import APIClient

from monitoring.checks import quality_check_run
from monitoring.models import GroundTruth, MonitoringPolicy, PredictionSample, QualityCheck, SamplePart
from monitoring.samples import WindowBounds
from monitoring.store.collect import parts_collect
from monitoring.store.retention import NEED_FEATURES, NEED_PREDICTIONS, payloads_expire
from monitoring.store.source import ColumnarSampleSource
from monitoring.window import range_window
from registry.models import RegisteredModel
from registry.reference import LABEL, PREDICTION
from tests.clock import NOW, T0, at
from tests.platform.conftest import stored_features
from tests.platform.monitoring.factories import json_rows_send, monitored_model, rows, send

pytestmark = pytest.mark.django_db
OLD = T0  # at least 2 days 16 hours before now: past a 2-day retention
FRESH = at(hours=-3, base=NOW)


def _model(days: int | None) -> RegisteredModel:
    model = monitored_model("sea", reference_rows=300, payload_retention_days=days)
    send(model, rows(250, seed=2), start=OLD, prefix="old")
    send(model, rows(250, seed=3), start=FRESH, prefix="new")
    return model


def test_json_rows_past_retention_are_left_to_the_move_and_dropped_once_moved(columnar: Path) -> None:
    """An upgraded install's samples still stored as JSON rows: the task leaves them to
    ``samples_to_columnar`` (their columns go with migration 0031); once moved into parts, the
    next run drops the old ones' features like any part's."""
    model = monitored_model("sea", reference_rows=300, payload_retention_days=2)
    json_rows_send(model, rows(250, seed=2), start=OLD, prefix="old")
    send(model, rows(250, seed=3), start=FRESH, prefix="new")
    assert payloads_expire() == 0
    call_command("samples_to_columnar", stdout=io.StringIO())
    old_parts = SamplePart.objects.filter(model=model, bucket__lt=FRESH - timedelta(days=1)).count()
    assert old_parts and payloads_expire() == old_parts
    stored = stored_features(model)
    assert all(v is None for k, values in stored.items() if k.startswith("old") for v in values.values())
    assert all(None not in values.values() for k, values in stored.items() if k.startswith("new"))
    assert GroundTruth.objects.filter(model=model).count() == 500


@pytest.mark.parametrize("days", [None, 0])
def test_no_retention_keeps_every_payload(days: int | None, columnar: Path) -> None:
    model = _model(days)
    assert payloads_expire() == 0
    stored = stored_features(model)
    assert len(stored) == 500 and all(None not in values.values() for values in stored.values())
    assert not SamplePart.objects.filter(payload_dropped=True).exists()


def test_columnar_parts_past_retention_lose_their_features_and_old_files_are_collected(
    columnar: Path,
) -> None:
    model = _model(2)
    old_parts = list(SamplePart.objects.filter(model=model, bucket__lt=FRESH - timedelta(days=1)))
    assert old_parts and SamplePart.objects.filter(model=model).count() > len(old_parts)
    before = ColumnarSampleSource().load(model=model, window=WindowBounds(None, NOW)).arrays
    assert payloads_expire() == len(old_parts)
    assert payloads_expire() == 0  # the rewritten parts are not rewritten again
    files = {p.name for p in old_parts}
    parts_collect(now=NOW + timedelta(days=1))  # past the grace
    assert not SamplePart.objects.filter(name__in=files).exists()
    assert not any((columnar / name).exists() for name in files)
    assert PredictionSample.objects.filter(model=model, part__payload_dropped=True).count() == 250
    after = ColumnarSampleSource().load(model=model, window=WindowBounds(None, NOW)).arrays
    old = np.char.startswith(after["sample_id"].astype(str), "old")
    assert len(after["sample_id"]) == 500 and old.sum() == 250  # index rows, predictions, labels kept
    x1 = after["x1"].astype(float)
    assert np.isnan(x1[old]).all() and not np.isnan(x1[~old]).any()
    assert all(v is None for v in after["segment"][old])
    for name in ("sample_id", PREDICTION, LABEL):
        assert sorted(map(str, after[name])) == sorted(map(str, before[name]))


def test_a_check_past_retention_runs_only_what_needs_no_raw_features(columnar: Path) -> None:
    model = _model(2)
    payloads_expire()
    check = QualityCheck.objects.get(
        pk=quality_check_run(model_id=model.pk, window=range_window(OLD, NOW)).pk
    )
    note = check.data_quality["retention"]
    assert (note["skipped"], note["run"], note["retention_days"]) == (NEED_FEATURES, NEED_PREDICTIONS, 2)
    assert check.drift == {} and check.n_samples == 500
    assert check.metrics["accuracy"] > 0.5 and check.prediction_drift  # from predictions + labels
    assert check.estimated  # CBPE needs only the probabilities
    fresh = QualityCheck.objects.get(
        pk=quality_check_run(model_id=model.pk, window=range_window(FRESH, NOW)).pk
    )
    assert "retention" not in fresh.data_quality and fresh.drift


@pytest.mark.parametrize("value", [-1, "7", 1.5, 10**6])
def test_a_bad_retention_is_a_400_naming_the_field(
    client_for: Callable[[str], APIClient], value: Any
) -> None:
    monitored_model()
    response = client_for("admin").patch(
        "/api/v1/models/sea/policy", {"payload_retention_days": value}, format="json"
    )
    assert response.status_code == 400, response.json()
    assert [e["field"] for e in response.json()["errors"]] == ["payload_retention_days"]
    assert MonitoringPolicy.objects.get(model__name="sea").payload_retention_days is None


@pytest.mark.parametrize("value", [None, 0, 30])
def test_a_retention_is_stored(client_for: Callable[[str], APIClient], value: Any) -> None:
    monitored_model()
    response = client_for("admin").patch(
        "/api/v1/models/sea/policy", {"payload_retention_days": value}, format="json"
    )
    assert response.status_code == 200, response.json()
    assert MonitoringPolicy.objects.get(model__name="sea").payload_retention_days == value
