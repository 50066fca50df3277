"""Every classifier metric CBPE estimates, from the calibrated probabilities (as NannyML's CBPE).

The calibrated probabilities (``ClassCalibrator``) are each row's expected labels. The expected
confusion matrix is ``C[i, j] = sum over rows of P(y = i) * [logged prediction = j]``; accuracy,
precision, recall and F1 (per class, then the positive class for binary and the macro mean) are
read from it. ROC AUC is the Mann-Whitney statistic with soft labels: the raw scores rank the
rows (the realised AUC ranks by them too), each pair weighted by P(i positive) * P(j negative).

Interval: the realised metric is simulated. Each draw perturbs every calibration block's rate by
its binomial error, draws the window's labels from those probabilities and computes the metrics
exactly as on real labels; the 95% interval is the estimate ± 1.96 sd of the draws. One code path
gives both the estimate (soft labels) and each draw (one-hot labels), so every metric's interval
is the same metric's spread.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from workers.drift.estimation import ClassCalibrator, Estimate, _predicted
from workers.drift.quality import Z_95, _prf

DRAWS = 200  # the sd of 200 draws is within ~5% of its limit: enough for a 95% band
SEED = 0  # fixed, so a check recomputed in another process stores the same interval
_BLOCK_CELLS = 4_000_000  # draws x rows x classes materialised at once (~32 MB)

BINARY_METRICS = (
    "accuracy",
    "roc_auc",
    "precision",
    "recall",
    "f1",
    "precision_macro",
    "recall_macro",
    "f1_macro",
)
MULTICLASS_METRICS = ("accuracy", "roc_auc", "precision_macro", "recall_macro", "f1_macro")


def classifier_metric_names(n_classes: int) -> tuple[str, ...]:
    """The stable names CBPE estimates for a classifier (the realised metrics' names)."""
    return BINARY_METRICS if n_classes == 2 else MULTICLASS_METRICS


def _auc(soft: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """Mann-Whitney AUC of ``scores`` for labels ``soft`` (draws x n, in [0, 1]); ties count half.

    With 0/1 labels it equals ``quality.roc_auc``; with probabilities it is the expected pair
    count over the expected pair total.
    """
    order = np.argsort(scores, kind="stable")
    ranked = scores[order]
    starts = np.flatnonzero(np.r_[True, ranked[1:] != ranked[:-1]])
    pos = np.add.reduceat(soft[:, order], starts, axis=1)
    neg = np.add.reduceat(1 - soft[:, order], starts, axis=1)
    below = np.cumsum(neg, axis=1) - neg
    # Self-pairs stay in, as NannyML's trapezoid over the expected ROC curve keeps them: on its
    # car-loan data that reads 0.4% closer to the realised AUC than leaving them out.
    pairs = pos.sum(axis=1) * neg.sum(axis=1)
    wins = np.sum(pos * (below + neg / 2), axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(pairs > 0, wins / pairs, np.nan)


def _metrics(labels: np.ndarray, scores: np.ndarray, predicted: np.ndarray) -> dict[str, np.ndarray]:
    """Each metric per draw; ``labels``: draws x n x k, soft (the estimate) or one-hot (a draw)."""
    n, k = scores.shape
    confusion = np.einsum("rni,nj->rij", labels, np.eye(k)[predicted])
    precision, recall, f1 = _prf(confusion)
    out = {
        "accuracy": np.trace(confusion, axis1=1, axis2=2) / n,
        "precision_macro": precision.mean(axis=1),
        "recall_macro": recall.mean(axis=1),
        "f1_macro": f1.mean(axis=1),
    }
    if k == 2:
        out.update(precision=precision[:, 1], recall=recall[:, 1], f1=f1[:, 1])
        out["roc_auc"] = _auc(labels[:, :, 1], scores[:, 1])
    else:
        out["roc_auc"] = np.mean([_auc(labels[:, :, c], scores[:, c]) for c in range(k)], axis=0)
    return out


def _perturbed(
    calibrator: ClassCalibrator, matrix: np.ndarray, draws: int, rng: np.random.Generator
) -> np.ndarray:
    """draws x n x k calibrated probabilities, each map's block rates moved by their binomial error."""
    columns = []
    for k, m in enumerate(calibrator.maps):
        sd = np.sqrt(m.accuracy * (1 - m.accuracy) / m.counts)
        rates = np.clip(m.accuracy + sd * rng.standard_normal((draws, m.accuracy.size)), 0.0, 1.0)
        columns.append(rates[:, m._bins(matrix[:, k])])
    stacked = np.stack(columns, axis=2)
    total = stacked.sum(axis=2, keepdims=True)
    return np.where(total > 0, stacked / np.where(total > 0, total, 1), matrix[None])


def _draw_labels(probabilities: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One-hot labels drawn from each row's class probabilities (draws x n x k)."""
    k = probabilities.shape[2]
    u = rng.random(probabilities.shape[:2])[..., None]
    codes = np.minimum((np.cumsum(probabilities, axis=2) < u).sum(axis=2), k - 1)
    return np.eye(k)[codes]


def _simulated(
    calibrator: ClassCalibrator, matrix: np.ndarray, predicted: np.ndarray, draws: int, seed: int
) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    block = max(1, _BLOCK_CELLS // matrix.size)
    parts: list[dict[str, np.ndarray]] = []
    for start in range(0, draws, block):  # a loop over blocks of draws, not rows
        probabilities = _perturbed(calibrator, matrix, min(block, draws - start), rng)
        parts.append(_metrics(_draw_labels(probabilities, rng), matrix, predicted))
    return {name: np.concatenate([p[name] for p in parts]) for name in parts[0]}


def estimate_classifier_metrics(
    calibrator: ClassCalibrator,
    current_probabilities: Any,
    predictions: Any | None = None,
    *,
    draws: int = DRAWS,
    seed: int = SEED,
) -> dict[str, Estimate]:
    """CBPE's estimate of every metric in ``classifier_metric_names`` for the logged predictions
    (the reference's decision rule where a row has none), each with its 95% interval. A metric
    undefined on the window (AUC with one expected class) is left out."""
    matrix = np.asarray(current_probabilities, dtype="float64")
    if matrix.shape[0] == 0:
        raise ValueError("no probabilities in the window")
    predicted = _predicted(matrix, predictions, calibrator)
    expected = _metrics(calibrator.calibrated(matrix)[None], matrix, predicted)
    spread = _simulated(calibrator, matrix, predicted, draws, seed)
    out = {}
    for name, value in expected.items():
        draws_of = spread[name][np.isfinite(spread[name])]
        if not np.isfinite(value[0]) or draws_of.size < 2:
            continue
        half = Z_95 * float(np.std(draws_of))
        v = float(value[0])
        out[name] = Estimate(v, max(0.0, v - half), min(1.0, v + half))
    return out
