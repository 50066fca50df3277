from typing import Any

from workers.drift.decisions import Thresholds, breach, decisions_make, higher_is_better

ACCURACY = Thresholds(metric="accuracy", tolerance=0.05, baseline=0.9, estimate_baseline=0.9)


def result(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "metrics": {"accuracy": 0.88},
        "estimated": {"value": 0.8},
        "drift": {"dataset_drift": True},
        "prediction_drift": {"drifted": False},
        "data_quality": {"broken_feed": False},
    }
    return base | overrides


def test_error_metrics_are_lower_is_better() -> None:
    assert [higher_is_better(m) for m in ("accuracy", "f1_macro", "r2", "mae", "rmse", "log_loss")] == [
        True,
        True,
        True,
        False,
        False,
        False,
    ]


def test_a_breach_is_past_the_tolerance_in_the_metrics_bad_direction() -> None:
    mae = Thresholds(metric="mae", tolerance=1.0, baseline=10.0)
    assert (breach(0.86, ACCURACY), breach(0.84, ACCURACY)) == (False, True)
    assert (breach(10.9, mae), breach(11.1, mae), breach(2.0, mae)) == (False, True, False)


def test_no_value_or_no_baseline_leaves_the_breach_undecided() -> None:
    no_baseline = Thresholds(metric="accuracy", tolerance=0.05, baseline=None)
    assert (breach(None, ACCURACY), breach(float("nan"), ACCURACY), breach(0.1, no_baseline)) == (
        None,
        None,
        None,
    )


def test_decisions_read_metrics_estimate_and_drift() -> None:
    decisions = decisions_make(result(), ACCURACY, enough=True)
    assert decisions["accuracy_drop"] is False and decisions["value"] == 0.88
    assert decisions["estimated_accuracy_drop"] is True  # 0.8 < 0.9 - 0.05
    assert (decisions["data_drift"], decisions["prediction_drift"]) == (True, False)
    assert decisions["usable_for_training"] is True and "suppressed" not in decisions


def test_a_broken_feed_suppresses_the_drift_decisions() -> None:
    decisions = decisions_make(result(data_quality={"broken_feed": True}), ACCURACY, enough=True)
    assert (decisions["data_drift"], decisions["prediction_drift"]) == (None, None)
    assert decisions["data_quality"] is True and decisions["usable_for_training"] is False
    assert "broken feed" in decisions["suppressed"]


def test_without_an_estimate_baseline_the_estimate_decides_nothing() -> None:
    thresholds = Thresholds(metric="f1_macro", tolerance=0.05, baseline=0.9)
    assert decisions_make(result(), thresholds, enough=True)["estimated_accuracy_drop"] is None
