"""CBPE estimates every metric teams alert on (ROC AUC, precision, recall, F1, binary and macro),
each with an interval, from the calibrated probabilities (issue 24 defect 2)."""

from __future__ import annotations

import numpy as np
import pytest

from workers.drift.cbpe import _auc, classifier_metric_names, estimate_classifier_metrics
from workers.drift.estimation import (
    ClassCalibrator,
    ConfidenceCalibrator,
    estimate_accuracy,
    fit_confidence_calibrator,
)
from workers.drift.quality import classification_metrics, roc_auc

CLASSES = ["a", "b", "c"]


def _binary(rng: np.random.Generator, n: int, x_mean: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    # An overconfident model (sigmoid(3x) for a sigmoid(2x) truth), thresholded at 0.65 and
    # rounded to two decimals as NannyML's car-loan model is.
    x = rng.normal(x_mean, 1.0, n)
    labels = (rng.random(n) < 1 / (1 + np.exp(-2 * x))).astype(int)
    p1 = np.round(1 / (1 + np.exp(-3 * x)), 2)
    return np.column_stack([1 - p1, p1]), labels, (p1 >= 0.65).astype(int)


def _multiclass(rng: np.random.Generator, n: int, x_mean: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    x = rng.normal(x_mean, 1.0, (n, 3))
    truth = np.exp(1.5 * x) / np.exp(1.5 * x).sum(axis=1, keepdims=True)
    labels = (rng.random((n, 1)) > np.cumsum(truth, axis=1)).sum(axis=1).clip(0, 2)
    model = np.exp(2.5 * x) / np.exp(2.5 * x).sum(axis=1, keepdims=True)  # overconfident
    return model, np.array(CLASSES)[labels], np.array(CLASSES)[model.argmax(axis=1)]


def _realised(
    labels: np.ndarray, predicted: np.ndarray, proba: np.ndarray, classes: list
) -> dict[str, float]:
    metrics = classification_metrics(
        labels, predicted, classes=classes, probabilities=proba, bootstrap_resamples=1
    )
    return {name: float(metrics[name]) for name in classifier_metric_names(len(classes))}  # type: ignore[literal-required]


def _track(make, classes: list) -> tuple[dict[str, float], dict[str, int]]:
    """Mean |estimate - realised| and chunks inside the interval, per metric, over 10 shifted chunks."""
    rng = np.random.default_rng(3)
    proba, labels, predicted = make(rng, 20_000, 0.0)
    calibrator = fit_confidence_calibrator(proba, labels, classes, reference_predictions=predicted)
    errors: dict[str, list[float]] = {}
    inside: dict[str, int] = {}
    for shift in np.linspace(-0.4, 0.4, 10):
        proba, labels, predicted = make(rng, 5000, float(shift))
        estimates = estimate_classifier_metrics(calibrator, proba, predicted)
        for name, realised in _realised(labels, predicted, proba, classes).items():
            e = estimates[name]
            errors.setdefault(name, []).append(abs(e.value - realised))
            inside[name] = inside.get(name, 0) + int(e.low <= realised <= e.high)
    return {n: float(np.mean(v)) for n, v in errors.items()}, inside


def test_every_binary_metric_tracks_its_realised_value_under_covariate_shift() -> None:
    errors, inside = _track(_binary, [0, 1])
    assert set(errors) == {
        "accuracy",
        "roc_auc",
        "precision",
        "recall",
        "f1",
        *(f"{m}_macro" for m in ("precision", "recall", "f1")),
    }
    for name, error in errors.items():
        assert error < 0.01, (name, error)
        assert inside[name] >= 8, (name, inside[name])


def test_every_macro_metric_tracks_its_realised_value_for_a_multiclass_model() -> None:
    errors, inside = _track(_multiclass, CLASSES)
    assert set(errors) == {"accuracy", "roc_auc", "precision_macro", "recall_macro", "f1_macro"}
    for name, error in errors.items():
        assert error < 0.015, (name, error)
        assert inside[name] >= 8, (name, inside[name])


def test_the_soft_label_auc_of_hard_labels_is_the_realised_auc() -> None:
    rng = np.random.default_rng(0)
    scores = np.round(rng.random(500), 1)  # ties, counted half
    labels = (rng.random(500) < scores).astype(int)
    auc = _auc(labels[None].astype(float), scores)[0]
    assert auc == pytest.approx(roc_auc(labels, np.column_stack([1 - scores, scores])))


def test_the_calibration_does_not_average_rows_across_the_decision_threshold() -> None:
    # A confident model (few rows near p = 0.65, as NannyML's car-loan model): twenty
    # equal-frequency bins pooled rows on both sides of the threshold, so on its own reference
    # the estimate read 0.0027 below the realised accuracy; one point per distinct p does not.
    rng = np.random.default_rng(5)
    x = rng.normal(0, 1, 50_000)
    labels = (rng.random(x.size) < 1 / (1 + np.exp(-7 * x))).astype(int)
    p1 = np.round(1 / (1 + np.exp(-8 * x)), 2)
    proba, predicted = np.column_stack([1 - p1, p1]), (p1 >= 0.65).astype(int)
    calibrator = fit_confidence_calibrator(proba, labels, [0, 1], reference_predictions=predicted)
    estimate, _, _ = estimate_accuracy(calibrator, proba, predicted)
    assert estimate == pytest.approx(float(np.mean(predicted == labels)), abs=0.0005)


def test_the_interval_narrows_with_the_window_and_is_reproducible() -> None:
    rng = np.random.default_rng(9)
    proba, labels, predicted = _binary(rng, 20_000, 0.0)
    calibrator = fit_confidence_calibrator(proba, labels, [0, 1], reference_predictions=predicted)
    small, large = (_binary(rng, n, 0.0) for n in (500, 8000))
    narrow = estimate_classifier_metrics(calibrator, large[0], large[2])["roc_auc"]
    wide = estimate_classifier_metrics(calibrator, small[0], small[2])["roc_auc"]
    assert (wide.high - wide.low) > 2 * (narrow.high - narrow.low) > 0
    assert estimate_classifier_metrics(calibrator, small[0], small[2])["roc_auc"] == wide


def _sampling_only(calibrator: ClassCalibrator) -> ClassCalibrator:
    """The same maps with their binomial error taken away (counts made huge)."""
    maps = tuple(ConfidenceCalibrator(m.edges, m.accuracy, m.counts * 1e12) for m in calibrator.maps)
    return ClassCalibrator(calibrator.classes, maps, calibrator.threshold)


def test_the_interval_holds_the_calibrations_own_error_from_a_small_reference() -> None:
    # Each trial: a fresh 1,000-row reference, then a covariate-shifted window of 2,000. The
    # map fitted on few rows is itself off, and that error is shared by every window it scores:
    # an interval of the window's sampling alone held the realised metrics in ~76% of the trials,
    # with each calibration block perturbed by its binomial error in ~91%.
    rng = np.random.default_rng(11)
    inside = sampling_inside = total = 0
    for _ in range(60):
        proba, labels, predicted = _binary(rng, 1000, 0.0)
        calibrator = fit_confidence_calibrator(proba, labels, [0, 1], reference_predictions=predicted)
        proba, labels, predicted = _binary(rng, 2000, 0.5)
        full = estimate_classifier_metrics(calibrator, proba, predicted, draws=100)
        bare = estimate_classifier_metrics(_sampling_only(calibrator), proba, predicted, draws=100)
        for name, realised in _realised(labels, predicted, proba, [0, 1]).items():
            inside += full[name].low <= realised <= full[name].high
            sampling_inside += bare[name].low <= realised <= bare[name].high
            total += 1
    assert inside / total >= 0.85, inside / total
    assert sampling_inside / total < 0.85, sampling_inside / total  # the term is what covers
