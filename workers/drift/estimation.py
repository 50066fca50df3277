"""Label-free accuracy estimate (confidence-based performance estimation, as NannyML's CBPE).

The model's top-class confidence is mapped to a probability of being right by a calibrator
fitted on the labelled reference set; the expected accuracy of a window is the mean of those
calibrated probabilities. It stays valid under covariate shift as long as P(correct |
confidence) does not change — the shift moves rows along the confidence axis, not the mapping.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from workers.drift.quality import Z_95

DEFAULT_BINS = 20  # equal-frequency bins: ~n/20 reference rows each, enough for a stable rate
# Fewer right (or wrong) reference predictions than this leave the calibrator nothing to learn:
# with no errors every confidence maps to 1.0 and the estimate can never fall.
MIN_OUTCOMES = 10


@dataclass(frozen=True)
class ConfidenceCalibrator:
    """Piecewise-constant, monotone map from top-class confidence to P(prediction correct)."""

    edges: np.ndarray  # inner bin edges (len(bins) - 1), ascending
    accuracy: np.ndarray  # calibrated P(correct) per bin, non-decreasing
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


def _pool_adjacent_violators(rates: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Isotonic (non-decreasing) fit of per-bin rates; loops over bins (~20), not rows."""
    blocks: list[list[float]] = []  # [rate, weight, n_bins]
    for rate, weight in zip(rates.tolist(), weights.tolist(), strict=True):
        blocks.append([rate, weight, 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            r2, w2, n2 = blocks.pop()
            r1, w1, n1 = blocks.pop()
            blocks.append([(r1 * w1 + r2 * w2) / (w1 + w2), w1 + w2, n1 + n2])
    return np.concatenate([np.full(int(n), r) for r, _, n in blocks])


def _confidence_and_correct(
    probabilities: Any, labels: Any, classes: Sequence[Any]
) -> tuple[np.ndarray, np.ndarray]:
    matrix = np.asarray(probabilities, dtype="float64")
    codes = pd.Categorical(np.asarray(labels, dtype=object), categories=list(classes)).codes
    if (codes < 0).any():
        raise ValueError("reference labels hold values outside classes")
    return matrix.max(axis=1), matrix.argmax(axis=1) == codes


def calibration_problem(probabilities: Any, labels: Any, classes: Sequence[Any]) -> str | None:
    """Why a reference cannot calibrate confidence (None when it can).

    CBPE learns P(correct | confidence) from the reference's right and wrong predictions; a
    reference with one class of outcome, or too few of either, yields a degenerate map (all
    1.0 when every prediction was right), so the estimate would read a constant.
    """
    _, correct = _confidence_and_correct(probabilities, labels, classes)
    wrong, right = int((~correct).sum()), int(correct.sum())
    if wrong == 0 or right == 0:
        which = "right" if wrong == 0 else "wrong"
        return f"every reference prediction is {which}: nothing to calibrate confidence against"
    if min(wrong, right) < MIN_OUTCOMES:
        which = "wrong" if wrong < right else "right"
        few = min(wrong, right)
        return f"only {few} {which} reference prediction(s) (need >= {MIN_OUTCOMES}) to calibrate confidence"
    return None


def fit_confidence_calibrator(
    reference_probabilities: Any,
    reference_labels: Any,
    classes: Sequence[Any],
    *,
    bins: int = DEFAULT_BINS,
) -> ConfidenceCalibrator:
    """Fit P(correct | top-class confidence) on the labelled reference set.

    Equal-frequency bins of confidence, per-bin accuracy, then pooled to be monotone
    (histogram + isotonic calibration). Predicted class = argmax of the probabilities.
    """
    confidence, correct = _confidence_and_correct(reference_probabilities, reference_labels, classes)
    inner = np.unique(np.quantile(confidence, np.linspace(0, 1, bins + 1)[1:-1]))
    index = np.searchsorted(inner, confidence, side="right")
    counts = np.bincount(index, minlength=inner.size + 1).astype("float64")
    hits = np.bincount(index, weights=correct, minlength=inner.size + 1)
    keep = counts > 0
    rates = _pool_adjacent_violators(hits[keep] / counts[keep], counts[keep])
    # Drop edges of empty bins so every remaining bin has reference rows behind it.
    kept_edges = inner[keep[1:]] if keep[0] else inner[keep[1:]][1:]
    return ConfidenceCalibrator(kept_edges, rates, counts[keep])


def estimate_accuracy(
    calibrator: ConfidenceCalibrator, current_probabilities: Any
) -> tuple[float, float, float]:
    """Estimated accuracy of a window from its probabilities alone: (estimate, ci_low, ci_high).

    The 95% interval combines the spread of the realised accuracy around its expectation
    (sum of Bernoulli variances) with the calibrator's own binomial error per bin.
    """
    matrix = np.asarray(current_probabilities, dtype="float64")
    if matrix.shape[0] == 0:
        raise ValueError("no probabilities in the window")
    bins = calibrator._bins(matrix.max(axis=1))
    p_correct = calibrator.accuracy[bins]
    n = p_correct.size
    estimate = float(p_correct.mean())
    sampling = float(np.sum(p_correct * (1 - p_correct))) / n**2
    share = np.bincount(bins, minlength=calibrator.accuracy.size) / n
    calibration = float(
        np.sum(share**2 * calibrator.accuracy * (1 - calibrator.accuracy) / calibrator.counts)
    )
    half = Z_95 * np.sqrt(sampling + calibration)
    return estimate, max(0.0, estimate - half), min(1.0, estimate + half)


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
