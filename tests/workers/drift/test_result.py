"""The one reader of stored check JSON: each absent key reads as its documented default, and what
the engine writes reads back unchanged."""

import pandas as pd

from workers.drift import data_drift, summarize_reference
from workers.drift.result import (
    DECISION_KINDS,
    check_read,
    decisions_read,
    drift_read,
    estimate_read,
    metrics_read,
    score_read,
)


def test_a_check_that_stored_nothing_reads_as_undecided_unusable_and_unmeasured() -> None:
    stored = check_read({})
    assert [stored.decisions.verdict(k) for k in DECISION_KINDS] == [None] * len(DECISION_KINDS)
    assert stored.decisions.usable_for_training is False
    assert (stored.estimated.metric, stored.estimated.value, stored.estimated.available) == (
        "accuracy",
        None,
        True,
    )
    assert (
        stored.drift.columns == {}
        and stored.drift.dataset_drift is None
        and stored.drift.multivariate is None
    )
    assert stored.prediction_drift is None and stored.data_quality.broken_feed is None
    assert stored.metrics.value("accuracy") is None and stored.per_version == {}


def test_null_columns_and_null_keys_read_like_absent_ones() -> None:
    assert decisions_read(None) == decisions_read({}) == decisions_read({"usable_for_training": None})
    assert estimate_read({"metric": None}).metric == "accuracy"


def test_a_verdict_is_only_ever_true_false_or_none() -> None:
    decisions = decisions_read({"accuracy_drop": True, "data_drift": False, "prediction_drift": "yes"})
    assert [decisions.verdict(k) for k in ("accuracy_drop", "data_drift", "prediction_drift")] == [
        True,
        False,
        None,
    ]
    assert decisions.breached == ["accuracy_drop"]


def test_numbers_that_are_not_finite_read_as_missing() -> None:
    metrics = metrics_read({"accuracy": float("nan"), "f1_macro": True, "mae": 2, "accuracy_ci": [0.1, 0.2]})
    assert (metrics.value("accuracy"), metrics.value("f1_macro"), metrics.value("mae")) == (None, None, 2.0)
    assert metrics.interval("accuracy") == (0.1, 0.2) and metrics.interval("mae") is None


def test_the_engines_drift_reads_back_with_every_score_and_its_direction() -> None:
    reference = pd.DataFrame({"x": [float(i % 50) for i in range(500)]})
    current = pd.DataFrame({"x": [float(i % 50) + 30 for i in range(500)]})
    written = data_drift(
        summarize_reference(reference, {"x": "numerical"}), current, {"x": "numerical"}
    ).to_dict()
    read = drift_read(written)
    column = read.columns["x"]
    stored = written["columns"]["x"]
    assert (column.method, column.score, column.threshold, column.drifted) == (
        stored["method"],
        stored["score"],
        stored["threshold"],
        stored["drifted"],
    )
    assert (
        column.higher_is_drift is stored["higher_is_drift"] and read.dataset_drift is written["dataset_drift"]
    )
    assert read.drifted_columns == ["x"]


def test_an_unmeasured_score_is_none_and_a_band_is_a_pair() -> None:
    assert score_read({}) is None and score_read(None) is None
    multivariate = score_read(
        {"method": "pca", "score": 0.3, "threshold": 0.2, "band": [0.1, 0.2], "drifted": True}
    )
    assert multivariate is not None and multivariate.band == (0.1, 0.2) and multivariate.drifted


def test_a_check_stored_before_per_metric_estimates_reads_its_one_estimate_by_name() -> None:
    old = estimate_read({"metric": "mae", "value": 1.5, "ci": [1.0, 2.0], "realised": 1.2})
    assert old.of("mae") is not None and old.of("mae").value == 1.5 and old.of("mae").ci == (1.0, 2.0)
    assert old.of("rmse") is None
    new = estimate_read({"metric": "mae", "value": 1.5, "metrics": {"rmse": {"value": "x", "ci": [1, 3]}}})
    assert new.of("rmse") is not None and new.of("rmse").value is None and new.of("rmse").ci == (1.0, 3.0)
