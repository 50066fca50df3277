"""The estimate scores the predictions actually logged, not the argmax of the probabilities."""

from __future__ import annotations

import numpy as np
import pytest

from workers.drift.estimation import estimate_accuracy, fit_confidence_calibrator, learn_threshold

THRESHOLD = 0.65  # the car-loan model predicts 1 only when p >= 0.65
CHUNK = 5000


def _binary(rng: np.random.Generator, n: int, x_mean: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    # Truth: P(y=1|x) = sigmoid(2x); the model outputs sigmoid(3x) and predicts with a threshold.
    x = rng.normal(x_mean, 1.0, n)
    labels = (rng.random(n) < 1 / (1 + np.exp(-2 * x))).astype(int)
    p1 = 1 / (1 + np.exp(-3 * x))
    return np.column_stack([1 - p1, p1]), labels, (p1 >= THRESHOLD).astype(int)


def _chunk_errors(*, logged: bool) -> np.ndarray:
    """Estimate minus realised accuracy (of the logged predictions) over 20 shifted chunks."""
    rng = np.random.default_rng(7)
    proba, labels, predicted = _binary(rng, 20_000, 0.0)
    calibrator = fit_confidence_calibrator(proba, labels, [0, 1], reference_predictions=predicted)
    errors = []
    for shift in np.linspace(-0.5, 0.5, 20):
        proba, labels, predicted = _binary(rng, CHUNK, float(shift))
        scored = predicted if logged else proba.argmax(axis=1)  # argmax: what main scored
        estimate, _, _ = estimate_accuracy(calibrator, proba, scored)
        errors.append(estimate - float(np.mean(predicted == labels)))
    return np.asarray(errors)


def test_thresholded_binary_estimate_is_unbiased_where_the_argmax_estimate_is_not() -> None:
    logged, argmax = _chunk_errors(logged=True), _chunk_errors(logged=False)
    assert abs(logged.mean()) < 0.003, logged.mean()
    assert argmax.mean() > 0.006, argmax.mean()  # the argmax model is more accurate than the logged one
    assert abs(logged.mean()) < argmax.mean() / 4


def test_multiclass_estimate_takes_the_calibrated_probability_of_the_logged_class() -> None:
    rng = np.random.default_rng(3)
    n, k = 30_000, 3
    logits = rng.normal(0, 1.5, (n, k))
    proba = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    labels = np.array([rng.choice(k, p=row) for row in proba])  # a calibrated model
    # The model logs class 2 whenever its probability is at least 0.2, argmax otherwise.
    predicted = np.where(proba[:, 2] >= 0.2, 2, proba.argmax(axis=1))
    assert (predicted != proba.argmax(axis=1)).mean() > 0.05
    calibrator = fit_confidence_calibrator(proba[:20_000], labels[:20_000], [0, 1, 2])
    window = slice(20_000, None)
    estimate, low, high = estimate_accuracy(calibrator, proba[window], predicted[window])
    realised = float(np.mean(predicted[window] == labels[window]))
    argmax_estimate, _, _ = estimate_accuracy(calibrator, proba[window], proba[window].argmax(axis=1))
    assert abs(estimate - realised) < 0.01, (estimate, realised)
    assert low <= realised <= high
    assert argmax_estimate - realised > 0.03  # scoring the argmax would be clearly wrong


def test_missing_predictions_use_the_threshold_learned_from_the_reference() -> None:
    rng = np.random.default_rng(5)
    proba, labels, predicted = _binary(rng, 20_000, 0.0)
    calibrator = fit_confidence_calibrator(proba, labels, [0, 1], reference_predictions=predicted)
    assert calibrator.threshold == pytest.approx(THRESHOLD, abs=0.005)
    window, _, window_predicted = _binary(rng, CHUNK, 0.3)
    missing = np.full(CHUNK, None, dtype=object)
    assert (calibrator.decide(window) == window_predicted).mean() > 0.999
    unlogged, _, _ = estimate_accuracy(calibrator, window, missing)
    logged, _, _ = estimate_accuracy(calibrator, window, window_predicted)
    argmax, _, _ = estimate_accuracy(calibrator, window, window.argmax(axis=1))
    assert unlogged == pytest.approx(logged, abs=1e-3)
    assert abs(argmax - logged) > 0.005  # the fallback is the learned rule, not the argmax


def test_a_reference_without_logged_predictions_falls_back_to_the_argmax_rule() -> None:
    proba = np.column_stack([np.linspace(1, 0, 11), np.linspace(0, 1, 11)])
    assert learn_threshold(proba, np.full(11, -1)) == 0.5


def test_the_learned_threshold_reproduces_every_reference_prediction_it_can() -> None:
    p1 = np.array([0.1, 0.4, 0.6, 0.64, 0.66, 0.9])
    predicted = (p1 >= 0.65).astype(int)
    threshold = learn_threshold(np.column_stack([1 - p1, p1]), predicted)
    assert 0.64 < threshold <= 0.66
    assert np.array_equal(p1 >= threshold, predicted == 1)
