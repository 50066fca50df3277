"""Thresholds learned from the reference's own variability, and the tolerance rules beside them."""

import numpy as np
import pandas as pd
import pytest

from workers.drift.decisions import Decisions, Thresholds, breach, decisions_make, realised_decide
from workers.drift.thresholds import MIN_BAND_CHUNKS, chunk_values, reference_band


def accuracy_of(chunk: pd.DataFrame) -> float:
    return float((chunk["label"] == chunk["prediction"]).mean())


def frame(n: int, *, seed: int, flip: float) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    label = rng.integers(0, 2, n)
    return pd.DataFrame({"label": label, "prediction": np.where(rng.random(n) < flip, 1 - label, label)})


def test_the_band_is_mean_plus_minus_three_sd_of_the_metric_over_whole_reference_chunks() -> None:
    data = frame(4250, seed=1, flip=0.1)  # 8 chunks of 500 and a 250-row tail, dropped
    band = reference_band(data, "accuracy", accuracy_of, chunk_size=500)
    assert band is not None
    chunks = [accuracy_of(data.iloc[i : i + 500]) for i in range(0, 4000, 500)]
    mean, sd = np.mean(chunks), np.std(chunks)
    assert (band.chunks, band.chunk_size) == (8, 500)
    assert band.lower == pytest.approx(mean - 3 * sd) and band.upper == pytest.approx(mean + 3 * sd)
    assert band.limit("accuracy") == band.lower


def test_the_band_is_clipped_to_the_metrics_range_and_an_error_metric_breaches_above_it() -> None:
    data = frame(2000, seed=2, flip=0.01)
    perfect = reference_band(data, "accuracy", accuracy_of, chunk_size=100, sigmas=50)
    assert (
        perfect is not None
        and perfect.upper == 1.0
        and perfect.lower == pytest.approx(perfect.mean - 50 * perfect.sd)
    )
    errors = reference_band(data, "mae", lambda c: 1 - accuracy_of(c), chunk_size=100, sigmas=50)
    assert errors is not None and errors.lower == 0.0 and errors.limit("mae") == errors.upper


def test_too_few_chunks_give_no_band_and_undefined_chunks_are_left_out() -> None:
    data = frame(500 * (MIN_BAND_CHUNKS - 1), seed=3, flip=0.1)
    assert reference_band(data, "accuracy", accuracy_of, chunk_size=500) is None
    assert chunk_values(frame(1000, seed=3, flip=0.1), 100, lambda c: None) == []


def test_a_band_decides_the_realised_and_the_estimated_metric_and_says_so() -> None:
    band = reference_band(frame(8000, seed=4, flip=0.1), "accuracy", accuracy_of, chunk_size=1000)
    assert band is not None
    thresholds = Thresholds(
        metric="accuracy",
        tolerance=0.05,
        baseline=0.9,
        estimate_baseline=0.9,
        rule="reference_band",
        band=band,
    )
    inside, outside = band.lower + 0.001, band.lower - 0.001
    assert band.lower > 0.9 - 0.05, "a drop the absolute 0.05 misses"
    measures = {
        "metrics": {"accuracy": outside},
        "estimated": {"metric": "accuracy", "value": inside},
        "drift": {},
        "prediction_drift": {},
        "data_quality": {},
    }
    decisions = decisions_make(measures, thresholds, enough=True)  # type: ignore[arg-type]
    assert decisions["accuracy_drop"] is True and decisions["estimated_accuracy_drop"] is False
    assert decisions["rule"] == "reference_band" and decisions["threshold"] == band.lower
    assert (
        decisions["band"]["lower"] == band.lower and "8 reference windows of 1000" in decisions["rule_text"]
    )
    assert decisions["baseline"] == band.mean, "the band is drawn around the reference's mean"


def test_without_a_band_the_band_rule_falls_back_to_the_absolute_tolerance_and_says_why() -> None:
    thresholds = Thresholds(
        metric="accuracy", tolerance=0.05, baseline=0.9, rule="reference_band", fallback="too small"
    )
    assert (breach(0.86, thresholds), breach(0.84, thresholds)) == (False, True)
    decisions = realised_decide({} | {"accuracy_drop": None}, {"accuracy": 0.84}, thresholds)  # type: ignore[arg-type]
    assert decisions["rule"] == "absolute" and "too small" in decisions["rule_text"]


def test_a_relative_tolerance_is_a_fraction_of_the_baseline_on_the_bad_side() -> None:
    accuracy = Thresholds(
        metric="accuracy", tolerance=0.5, baseline=0.8, rule="relative", relative_tolerance=0.1
    )
    mae = Thresholds(metric="mae", tolerance=0.5, baseline=20.0, rule="relative", relative_tolerance=0.1)
    assert (breach(0.73, accuracy), breach(0.71, accuracy)) == (False, True)  # edge 0.72
    assert (breach(21.9, mae), breach(22.1, mae), breach(5.0, mae)) == (False, True, False)  # edge 22


def test_a_drop_the_sequential_detector_found_stays_when_the_window_decides_again() -> None:
    thresholds = Thresholds(metric="accuracy", tolerance=0.05, baseline=0.9)
    decisions: Decisions = {"accuracy_drop": True, "accuracy_drop_by": "sequential detector"}  # type: ignore[typeddict-item]
    assert realised_decide(decisions, {"accuracy": 0.95}, thresholds)["accuracy_drop"] is True
    assert realised_decide({"accuracy_drop": None}, {"accuracy": 0.95}, thresholds)["accuracy_drop"] is False  # type: ignore[typeddict-item]
