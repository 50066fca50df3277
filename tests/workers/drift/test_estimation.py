"""CBPE-style accuracy estimate under covariate shift with a miscalibrated model."""

from __future__ import annotations

import numpy as np
import pytest

from workers.drift.estimation import (
    ClassCalibrator,
    calibration_problem,
    estimate_accuracy,
    estimation_error,
    fit_confidence_calibrator,
)


def _sample(rng: np.random.Generator, n: int, x_mean: float) -> tuple[np.ndarray, np.ndarray]:
    # Truth: P(y=1|x) = sigmoid(2x). The model is overconfident: it outputs sigmoid(5x).
    x = rng.normal(x_mean, 1.0, n)
    labels = (rng.random(n) < 1 / (1 + np.exp(-2 * x))).astype(int)
    p1 = 1 / (1 + np.exp(-5 * x))
    return np.column_stack([1 - p1, p1]), labels


def _realised(probabilities: np.ndarray, labels: np.ndarray) -> float:
    return float(np.mean(probabilities.argmax(axis=1) == labels))


def test_calibrated_estimate_tracks_realised_accuracy_under_covariate_shift() -> None:
    rng = np.random.default_rng(0)
    calibrator = fit_confidence_calibrator(*_sample(rng, 20_000, 0.0), classes=[0, 1])
    for shift in (0.0, 0.7, 1.5):  # the shift moves mass towards confident, easy rows
        probabilities, labels = _sample(rng, 20_000, shift)
        realised = _realised(probabilities, labels)
        estimate, low, high = estimate_accuracy(calibrator, probabilities)
        raw_confidence = float(probabilities.max(axis=1).mean())
        assert abs(estimate - realised) < 0.015, (shift, estimate, realised)
        assert abs(estimate - realised) < abs(raw_confidence - realised)
        assert low <= realised <= high


def test_calibrator_is_monotone_and_round_trips() -> None:
    rng = np.random.default_rng(1)
    calibrator = fit_confidence_calibrator(*_sample(rng, 5000, 0.0), classes=[0, 1])
    assert all(np.all(np.diff(m.accuracy) >= 0) for m in calibrator.maps)
    restored = ClassCalibrator.from_dict(calibrator.to_dict())
    probabilities, _ = _sample(rng, 1000, 0.5)
    assert estimate_accuracy(restored, probabilities) == estimate_accuracy(calibrator, probabilities)


def test_estimate_is_a_probability_even_for_extreme_windows() -> None:
    rng = np.random.default_rng(2)
    calibrator = fit_confidence_calibrator(*_sample(rng, 5000, 0.0), classes=[0, 1])
    estimate, low, high = estimate_accuracy(calibrator, np.array([[0.5, 0.5], [1.0, 0.0]]))
    assert 0.0 <= low <= estimate <= high <= 1.0
    assert estimate == pytest.approx(estimate)


def test_estimation_error_is_tracked_against_realised_accuracy() -> None:
    tracked = estimation_error((0.8, 0.78, 0.82), 0.79)
    assert tracked["error"] == pytest.approx(0.01) and tracked["realised_within_ci"]
    assert not estimation_error((0.8, 0.78, 0.82), 0.7)["realised_within_ci"]


@pytest.mark.parametrize(
    ("wrong", "expected"),
    [(0, "every reference prediction is right"), (3, "only 3 wrong reference prediction(s)"), (50, None)],
)
def test_calibration_problem_names_a_reference_with_too_few_errors(wrong: int, expected: str | None) -> None:
    probabilities = np.tile([0.2, 0.8], (500, 1))
    labels = np.ones(500, dtype=int)
    labels[:wrong] = 0
    problem = calibration_problem(probabilities, labels, [0, 1])
    assert problem is None if expected is None else expected in str(problem)
