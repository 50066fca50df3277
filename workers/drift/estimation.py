"""Label-free accuracy estimate (confidence-based performance estimation, as NannyML's CBPE).

Each class's predicted probability is calibrated on the labelled reference set (one-vs-rest
histogram + isotonic maps, renormalised per row). The expected accuracy of a logged prediction
ŷ is the calibrated probability of the class ŷ — not of the argmax, which a model with a
decision threshold (p ≥ 0.65) does not predict — and a window's expected accuracy is their
mean. Rows without a logged prediction use the decision rule learned from the reference
(binary: the threshold on p(positive) that best reproduces its logged predictions; multiclass:
the argmax). It stays valid under covariate shift as long as P(class | probability) does not
change — the shift moves rows along the probability axis, not the mapping.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from workers.drift.quality import Z_95
from workers.drift.stats import SampleDict

DEFAULT_BINS: int | None = None  # isotonic over every distinct reference probability (see _fit_map)
# Fewer right (or wrong) reference predictions than this leave the calibrator nothing to learn:
# with no errors every confidence maps to 1.0 and the estimate can never fall.
MIN_OUTCOMES = 10
ARGMAX_THRESHOLD = 0.5  # binary rule when the reference logged no predictions


@dataclass(frozen=True)
class Estimate:
    """One label-free estimate and its 95% interval (CBPE's or DLE's, any metric); ``sample``:
    made from a sample of the window's rows, and that sample's stated error (the interval
    widened by it)."""

    value: float
    low: float
    high: float
    sample: SampleDict | None = None

    def to_dict(self) -> dict[str, Any]:
        found: dict[str, Any] = {"value": self.value, "ci": [self.low, self.high]}
        if self.sample is not None:
            found["sample"] = self.sample
        return found


@dataclass(frozen=True)
class ConfidenceCalibrator:
    """Piecewise-constant, monotone map from one probability to the rate it predicts."""

    edges: np.ndarray  # inner bin edges (len(bins) - 1), ascending
    accuracy: np.ndarray  # calibrated rate per bin, non-decreasing
    counts: np.ndarray  # reference rows per bin (after pooling)

    def predict(self, confidence: np.ndarray) -> np.ndarray:
        return self.accuracy[self._bins(confidence)]

    def _bins(self, confidence: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.edges, confidence, side="right")

    def to_dict(self) -> dict[str, list[float]]:
        return {
            "edges": self.edges.tolist(),
            "accuracy": self.accuracy.tolist(),
            "counts": self.counts.tolist(),
        }

    @classmethod
    def from_dict(cls, data: dict[str, list[float]]) -> ConfidenceCalibrator:
        return cls(
            np.asarray(data["edges"], float),
            np.asarray(data["accuracy"], float),
            np.asarray(data["counts"], float),
        )


@dataclass(frozen=True)
class ClassCalibrator:
    """One calibration map per class (P(y = k | p_k)) and the reference's decision rule."""

    classes: tuple[Any, ...]
    maps: tuple[ConfidenceCalibrator, ...]
    threshold: float  # binary: predict classes[1] when p(classes[1]) >= threshold

    @property
    def is_constant(self) -> bool:
        """Every probability maps to one value: the estimate would read a constant."""
        return all(np.ptp(m.accuracy) == 0 for m in self.maps)

    def calibrated(self, probabilities: np.ndarray) -> np.ndarray:
        """n × k calibrated class probabilities, each row summing to one."""
        matrix = np.column_stack([m.predict(probabilities[:, k]) for k, m in enumerate(self.maps)])
        total = matrix.sum(axis=1, keepdims=True)
        # A row every map calls impossible keeps its raw probabilities rather than divide by 0.
        return np.where(total > 0, matrix / np.where(total > 0, total, 1), probabilities)

    def decide(self, probabilities: np.ndarray) -> np.ndarray:
        """Class codes the reference's decision rule gives (for rows without a logged one)."""
        if len(self.classes) == 2:
            return (probabilities[:, 1] >= self.threshold).astype(np.int64)
        return probabilities.argmax(axis=1).astype(np.int64)

    def to_dict(self) -> dict[str, Any]:
        return {
            "classes": list(self.classes),
            "maps": [m.to_dict() for m in self.maps],
            "threshold": self.threshold,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ClassCalibrator:
        maps = tuple(ConfidenceCalibrator.from_dict(m) for m in data["maps"])
        return cls(tuple(data["classes"]), maps, float(data["threshold"]))


def _pool_adjacent_violators(rates: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Isotonic (non-decreasing) fit of per-point rates, weighted by their rows."""
    # Imported here: scikit-learn's compiled PAV (one point per distinct probability, up to n of
    # them) is only needed where a reference is fitted.
    from sklearn.isotonic import isotonic_regression

    return np.asarray(isotonic_regression(rates, sample_weight=weights, increasing=True), dtype="float64")


def _label_codes(labels: Any, classes: Sequence[Any]) -> np.ndarray:
    codes = pd.Categorical(np.asarray(labels, dtype=object), categories=list(classes)).codes
    if (codes < 0).any():
        raise ValueError("reference labels hold values outside classes")
    return codes.astype(np.int64)


def prediction_codes(predictions: Any, classes: Sequence[Any], n: int) -> np.ndarray:
    """Logged predictions as class codes; -1 where a row has none (or one outside classes)."""
    if predictions is None:
        return np.full(n, -1, dtype=np.int64)
    values = pd.Series(np.asarray(predictions, dtype=object)).where(lambda s: s.notna(), None)
    return pd.Categorical(values.to_numpy(dtype=object), categories=list(classes)).codes.astype(np.int64)


def learn_threshold(probabilities: np.ndarray, predicted: np.ndarray) -> float:
    """The threshold on p(classes[1]) that best reproduces the logged binary predictions.

    Rule: predict 1 when p >= t. Every distinct p is a candidate; agreement at each is counted
    with cumulative sums (O(n log n)). Ties keep the candidate nearest the argmax rule (0.5).
    """
    logged = predicted >= 0
    if not logged.any():
        return ARGMAX_THRESHOLD
    p, ones = probabilities[logged, 1], predicted[logged] == 1
    order = np.argsort(p, kind="stable")
    p, ones = p[order], ones[order]
    starts = np.flatnonzero(np.r_[True, p[1:] != p[:-1]])  # first row of each distinct p
    zeros_below = np.cumsum(np.r_[0, ~ones])[starts]
    ones_from = ones.sum() - np.cumsum(np.r_[0, ones])[starts]
    candidates = np.r_[p[starts], np.inf]  # t = inf: predict 0 everywhere
    agree = np.r_[zeros_below + ones_from, (~ones).sum()]
    best = np.flatnonzero(agree == agree.max())
    chosen = candidates[best[np.argmin(np.abs(candidates[best] - ARGMAX_THRESHOLD))]]
    # Midway between the chosen p and the one below: the learned rule does not sit on a row.
    if not np.isfinite(chosen):  # JSON holds no infinity: just above every reference p
        return float(np.nextafter(p.max(), np.inf))
    below = p[p < chosen]
    return float((chosen + below.max()) / 2 if below.size else chosen)


def _predicted(probabilities: np.ndarray, predictions: Any, rule: ClassCalibrator) -> np.ndarray:
    codes = prediction_codes(predictions, rule.classes, probabilities.shape[0])
    return np.where(codes >= 0, codes, rule.decide(probabilities))


def calibration_problem(
    probabilities: Any, labels: Any, classes: Sequence[Any], predictions: Any | None = None
) -> str | None:
    """Why a reference cannot calibrate its probabilities (None when it can).

    CBPE learns P(class | probability) from the reference's right and wrong predictions (the
    logged ones, else the argmax); a reference with one class of outcome, or too few of either,
    yields a degenerate map (1.0 when every prediction was right): the estimate reads a constant.
    """
    matrix = np.asarray(probabilities, dtype="float64")
    codes = prediction_codes(predictions, classes, matrix.shape[0])
    correct = np.where(codes >= 0, codes, matrix.argmax(axis=1)) == _label_codes(labels, classes)
    wrong, right = int((~correct).sum()), int(correct.sum())
    if wrong == 0 or right == 0:
        which = "right" if wrong == 0 else "wrong"
        return f"every reference prediction is {which}: nothing to calibrate confidence against"
    if min(wrong, right) < MIN_OUTCOMES:
        which = "wrong" if wrong < right else "right"
        few = min(wrong, right)
        return f"only {few} {which} reference prediction(s) (need >= {MIN_OUTCOMES}) to calibrate confidence"
    return None


def _fit_map(values: np.ndarray, hits: np.ndarray, bins: int | None) -> ConfidenceCalibrator:
    """The rate of ``hits`` as a monotone function of ``values`` (isotonic, as NannyML calibrates).

    ``bins=None`` (the default): every distinct reference value is its own point before pooling,
    so a rate never averages rows on both sides of a decision threshold (20 equal-frequency bins
    did, and biased the car-loan estimate by -0.004 on the reference itself). An integer keeps
    the old equal-frequency binning.
    """
    if bins is None:
        points, index = np.unique(values, return_inverse=True)
        inner = (points[1:] + points[:-1]) / 2  # a new value takes its nearest reference point's rate
    else:
        inner = np.unique(np.quantile(values, np.linspace(0, 1, bins + 1)[1:-1]))
        index = np.searchsorted(inner, values, side="right")
    counts = np.bincount(index, minlength=inner.size + 1).astype("float64")
    rate_hits = np.bincount(index, weights=hits, minlength=inner.size + 1)
    keep = counts > 0
    rates = _pool_adjacent_violators(rate_hits[keep] / counts[keep], counts[keep])
    # Drop edges of empty bins so every remaining bin has reference rows behind it.
    kept_edges = inner[keep[1:]] if keep[0] else inner[keep[1:]][1:]
    return _merge_blocks(kept_edges, rates, counts[keep])


def _merge_blocks(edges: np.ndarray, rates: np.ndarray, counts: np.ndarray) -> ConfidenceCalibrator:
    """One bin per pooled block (equal neighbouring rates): what is stored stays small."""
    starts = np.flatnonzero(np.r_[True, rates[1:] != rates[:-1]])
    return ConfidenceCalibrator(edges[starts[1:] - 1], rates[starts], np.add.reduceat(counts, starts))


def fit_confidence_calibrator(
    reference_probabilities: Any,
    reference_labels: Any,
    classes: Sequence[Any],
    *,
    reference_predictions: Any | None = None,
    bins: int | None = DEFAULT_BINS,
) -> ClassCalibrator:
    """Fit P(y = k | p_k) per class on the labelled reference set, and its decision rule.

    The maps do not depend on the predictions; ``reference_predictions`` (the logged ones,
    missing allowed) only teach the binary threshold used for window rows without one.
    """
    matrix = np.asarray(reference_probabilities, dtype="float64")
    labels = _label_codes(reference_labels, classes)
    maps = tuple(_fit_map(matrix[:, k], labels == k, bins) for k in range(len(classes)))
    logged = prediction_codes(reference_predictions, classes, matrix.shape[0])
    binary = len(classes) == 2
    threshold = learn_threshold(matrix, logged) if binary else ARGMAX_THRESHOLD
    return ClassCalibrator(tuple(classes), maps, threshold)


def estimate_accuracy(
    calibrator: ClassCalibrator, current_probabilities: Any, predictions: Any | None = None
) -> tuple[float, float, float]:
    """Estimated accuracy of the window's logged predictions: (estimate, ci_low, ci_high).

    Each row's expected correctness is the calibrated probability of its logged class (the
    reference's decision rule where none is logged). The 95% interval combines the spread of
    the realised accuracy around its expectation (sum of Bernoulli variances) with each map's
    binomial error per bin.
    """
    matrix = np.asarray(current_probabilities, dtype="float64")
    if matrix.shape[0] == 0:
        raise ValueError("no probabilities in the window")
    n = matrix.shape[0]
    predicted = _predicted(matrix, predictions, calibrator)
    p_correct = calibrator.calibrated(matrix)[np.arange(n), predicted]
    estimate = float(p_correct.mean())
    sampling = float(np.sum(p_correct * (1 - p_correct))) / n**2
    half = Z_95 * np.sqrt(sampling + _calibration_variance(calibrator, matrix, predicted))
    return estimate, max(0.0, estimate - half), min(1.0, estimate + half)


def _calibration_variance(calibrator: ClassCalibrator, matrix: np.ndarray, predicted: np.ndarray) -> float:
    """Variance the maps' own per-bin rates add: rows of class k share map k's bin errors."""
    total = 0.0
    for k, m in enumerate(calibrator.maps):
        bins = m._bins(matrix[predicted == k, k])
        share = np.bincount(bins, minlength=m.accuracy.size) / matrix.shape[0]
        total += float(np.sum(share**2 * m.accuracy * (1 - m.accuracy) / m.counts))
    return total


def estimation_error(estimate: tuple[float, float, float], realised_accuracy: float) -> dict[str, Any]:
    """The estimate beside the realised accuracy once labels arrive, so its own error is tracked."""
    value, low, high = estimate
    return {
        "estimated_accuracy": value,
        "estimated_accuracy_ci": [low, high],
        "realised_accuracy": realised_accuracy,
        "error": value - realised_accuracy,
        "realised_within_ci": bool(low <= realised_accuracy <= high),
    }
