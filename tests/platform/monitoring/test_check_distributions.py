"""A check stores, per drift column, the reference and window distributions with effect sizes,
so the per-feature drill-down reads check rows only."""

from datetime import datetime, timedelta

import pytest

from monitoring.checks import quality_check_run
from monitoring.models import CheckDistribution, MonitoringPolicy, QualityCheck
from monitoring.selectors import column_drift_series, column_effects
from monitoring.window import scheduled_window
from registry.models import RegisteredModel
from registry.reference import PREDICTION
from tests.clock import T0
from tests.platform.monitoring.factories import monitored_model, rows, send
from workers.drift.result import score_read

pytestmark = pytest.mark.django_db


def _check(model: RegisteredModel, end: datetime) -> QualityCheck:
    check = quality_check_run(
        model_id=model.pk, window=scheduled_window(MonitoringPolicy.objects.get(model=model), end)
    )
    assert check is not None
    return QualityCheck.objects.get(pk=check.pk)


def _drifted() -> tuple[RegisteredModel, QualityCheck, QualityCheck]:
    model = monitored_model("sea", reference_rows=1000, window_size=400, min_samples=100, min_labels=100)
    send(model, rows(400, seed=2), start=T0, prefix="good")
    good = _check(model, T0 + timedelta(hours=1))
    send(model, rows(400, seed=3, shift=1.5, flip=0.4), start=T0 + timedelta(hours=1), prefix="bad")
    return model, good, _check(model, T0 + timedelta(hours=2))


def test_a_check_stores_a_distribution_per_feature_and_the_prediction() -> None:
    _, good, bad = _drifted()
    columns = set(CheckDistribution.objects.filter(quality_check=bad).values_list("column", flat=True))
    assert columns == {"x1", "x2", "segment", PREDICTION}
    x1 = CheckDistribution.objects.get(quality_check=bad, column="x1").payload
    assert x1["column_type"] == "numerical" and x1["n_current"] == 400 and x1["n_reference"] == 1000
    segment = CheckDistribution.objects.get(quality_check=bad, column="segment").payload
    assert sorted(segment["labels"]) == ["a", "b", "c"] and segment["cramers_v"] > 0.2


def test_the_shifted_feature_has_the_large_effect_and_the_steady_one_a_small_one() -> None:
    _, good, bad = _drifted()
    psi = dict(CheckDistribution.objects.filter(quality_check=bad).values_list("column", "psi"))
    assert psi["x1"] > 0.25 > 0.1 > psi["x2"]
    assert CheckDistribution.objects.get(quality_check=good, column="x1").psi < 0.1


def test_re_running_the_same_window_replaces_its_distributions() -> None:
    model, _, bad = _drifted()
    before = CheckDistribution.objects.count()
    assert _check(model, T0 + timedelta(hours=2)).pk == bad.pk
    assert CheckDistribution.objects.count() == before


def test_a_window_too_small_for_drift_stores_no_distribution() -> None:
    model = monitored_model("small", reference_rows=500, window_size=400, min_samples=300, min_labels=100)
    send(model, rows(150, seed=2), start=T0, prefix="few")
    check = _check(model, T0 + timedelta(hours=1))
    assert not check.drift and not CheckDistribution.objects.filter(quality_check=check).exists()


def test_the_series_is_one_stored_score_per_check_oldest_first() -> None:
    model, good, bad = _drifted()
    series = column_drift_series(model=model, column="x1")
    assert [p["id"] for p in series] == [good.pk, bad.pk]
    assert [p["column"].score for p in series] == [
        good.drift["columns"]["x1"]["score"],
        bad.drift["columns"]["x1"]["score"],
    ]
    prediction = column_drift_series(model=model, column=PREDICTION)
    assert prediction[-1]["column"] == score_read(bad.prediction_drift)
    effects = column_effects(model=model, column="x1", check_ids=[good.pk, bad.pk])
    assert set(effects) == {good.pk, bad.pk}


def test_the_series_respects_the_range_and_the_limit() -> None:
    model, good, bad = _drifted()
    assert [p["id"] for p in column_drift_series(model=model, column="x1", start=good.window_end)] == [bad.pk]
    assert [p["id"] for p in column_drift_series(model=model, column="x1", limit=1)] == [bad.pk]
