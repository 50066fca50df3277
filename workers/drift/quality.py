"""Quality metrics of one window with labels: classification and regression, with intervals.

Everything is vectorised over rows; outputs are JSON-ready (floats or None, never NaN).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any, NotRequired, TypedDict

import numpy as np
import pandas as pd

Z_95 = 1.959963984540054  # two-sided 95% normal quantile
BOOTSTRAP_RESAMPLES = 200  # enough for a stable 95% interval on a dashboard, cheap per check
BOOTSTRAP_SEED = 0  # fixed, so re-running a check stores the same interval
_BOOTSTRAP_CHUNK_ROWS = 2_000_000  # resampled rows materialised at once (regression bootstrap)


class ClassMetrics(TypedDict):
    precision: float
    recall: float
    f1: float
    support: int


class ClassificationMetrics(TypedDict):
    """A check's realised metrics for a classifier (``QualityCheck.metrics``); with no labelled
    sample only n, accuracy, accuracy_ci and per_class are present."""

    n: int
    accuracy: float | None
    accuracy_ci: list[float | None]
    per_class: dict[str, ClassMetrics]
    precision_macro: NotRequired[float]
    recall_macro: NotRequired[float]
    f1_macro: NotRequired[float]
    f1_macro_ci: NotRequired[list[float | None]]
    confusion_matrix: NotRequired[list[list[int]]]
    roc_auc: NotRequired[float | None]
    log_loss: NotRequired[float | None]
    # binary only: the positive class's (classes[1]), as CBPE estimates them
    precision: NotRequired[float]
    recall: NotRequired[float]
    f1: NotRequired[float]


class RegressionMetrics(TypedDict):
    """A check's realised metrics for a regressor (``QualityCheck.metrics``)."""

    n: int
    mae: float | None
    rmse: float | None
    r2: float | None
    mse: NotRequired[float | None]
    mae_ci: NotRequired[list[float | None]]
    rmse_ci: NotRequired[list[float | None]]
    r2_ci: NotRequired[list[float | None]]


class LabelStats(TypedDict):
    """Label coverage and delay of a window (``QualityCheck.labels``)."""

    n: int
    n_labelled: int
    label_coverage: float | None
    label_delay_median_s: float | None
    label_delay_p90_s: float | None
    label_delay_max_s: float | None


Metrics = ClassificationMetrics | RegressionMetrics


def _json(value: float) -> float | None:
    return float(value) if np.isfinite(value) else None


def _interval(low: float, high: float) -> list[float | None]:
    return [_json(low), _json(high)]


def wilson_interval(successes: int, n: int, z: float = Z_95) -> list[float | None]:
    """Wilson score interval for a proportion; well-behaved near 0 and 1 and for small n."""
    if n == 0:
        return [None, None]
    p = successes / n
    denominator = 1 + z**2 / n
    centre = (p + z**2 / (2 * n)) / denominator
    half = z * np.sqrt(p * (1 - p) / n + z**2 / (4 * n**2)) / denominator
    return _interval(centre - half, centre + half)


def _codes(values: Any, classes: Sequence[Any], what: str) -> np.ndarray:
    array = np.asarray(values)
    if array.dtype.kind == "f" and all(type(c) is int for c in classes) and _integral(array):
        array = array.astype(np.int64)  # 1.0 is the class 1, as the objects would match it
    if array.dtype.kind == "i" and all(type(c) is int for c in classes):
        # Integer classes held as numbers (the columnar source's int64 classes; labels are
        # float64 where some are missing): matched as numbers, as the objects would be, by a
        # binary search of the classes (5M rows: 0.46 s per side as objects, 0.34 s through
        # pandas' Categorical, 0.03 s here).
        codes = _integer_codes(array, np.asarray(classes, dtype=np.int64))
    else:
        codes = pd.Categorical(np.asarray(values, dtype=object), categories=list(classes)).codes.astype(
            np.int64
        )
    unknown = codes < 0
    if unknown.any():
        examples = pd.unique(np.asarray(values, dtype=object)[unknown])[:5].tolist()
        raise ValueError(f"{what} holds values outside classes: {examples}")
    return codes


def _integral(array: np.ndarray) -> bool:
    """Every value a whole number int64 holds exactly (NaN and ±inf are not)."""
    if array.size == 0:
        return True
    low, high = float(array.min()), float(array.max())  # NaN if any is NaN: then False below
    return bool(-(2.0**63) <= low and high < 2.0**63 and np.array_equal(array, np.trunc(array)))


# Integer classes spanning fewer values than this are looked up in a table over their span.
TABLE_SPAN = 1 << 16


def _integer_codes(array: np.ndarray, classes: np.ndarray) -> np.ndarray:
    """Each value's place in ``classes`` (the first, if a class repeats), -1 for no class: read
    from a table over the classes' span when it is short (5,000,000 labels of classes 0 and 1:
    0.03 s, against 0.09 s by a binary search of the classes), else by that search."""
    low, high = int(classes.min()), int(classes.max())
    if high - low < TABLE_SPAN:
        span = high - low + 1
        table = np.full(span + 1, -1, dtype=np.int64)  # the last slot: every value outside the span
        table[(classes - low)[::-1]] = np.arange(len(classes) - 1, -1, -1)  # the last write wins
        # The distance above ``low`` as unsigned: a value below it wraps past the span, and only
        # the values low..high land inside it (modulo 2**64, as numpy's int64 arithmetic wraps).
        above = (array.astype(np.int64, copy=False) - low).view(np.uint64)
        return table[np.minimum(above, np.uint64(span))]
    order = np.argsort(classes, kind="stable")
    ordered = classes[order]
    at = np.minimum(np.searchsorted(ordered, array), len(ordered) - 1)
    return np.where(ordered[at] == array, order[at], -1).astype(np.int64)


def confusion_matrix(true_codes: np.ndarray, pred_codes: np.ndarray, k: int) -> np.ndarray:
    """Rows: true class, columns: predicted class."""
    return np.bincount(true_codes * k + pred_codes, minlength=k * k).reshape(k, k)


def _prf(confusion: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-class precision, recall, F1 on the last two axes (batched); 0 where undefined,
    as scikit-learn's zero_division=0."""
    tp = np.diagonal(confusion, axis1=-2, axis2=-1).astype("float64")
    predicted, actual = confusion.sum(axis=-2), confusion.sum(axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        precision = np.where(predicted > 0, tp / predicted, 0.0)
        recall = np.where(actual > 0, tp / actual, 0.0)
        f1 = np.where(predicted + actual > 0, 2 * tp / (predicted + actual), 0.0)
    return precision, recall, f1


def _bootstrap_macro_f1(confusion: np.ndarray, resamples: int, seed: int) -> list[float | None]:
    # Resampling rows with replacement is a multinomial draw over confusion cells, so the
    # bootstrap costs O(resamples * k^2), whatever the window size.
    n, k = int(confusion.sum()), confusion.shape[0]
    rng = np.random.default_rng(seed)
    draws = rng.multinomial(n, confusion.ravel() / n, size=resamples).reshape(resamples, k, k)
    macro = _prf(draws)[2].mean(axis=1)
    return _interval(*np.percentile(macro, [2.5, 97.5]))


def _binary_auc(scores: np.ndarray, positive: np.ndarray) -> float | None:
    """Mann-Whitney form of ROC AUC, ties counted half (equals scikit-learn's): U counts, for
    each positive, the negatives scored below it and half those scored the same, read off the
    two sides sorted apart (5M scores: 1.3 s by ranking them all, 0.3 s so). U is an integer
    count (2U here), so the quotient is the ranks' own to the last bit."""
    n_pos = int(positive.sum())
    n_neg = positive.size - n_pos
    if n_pos == 0 or n_neg == 0:
        return None
    if not np.isfinite(scores).all():  # NaN takes no place among numbers: ranked as scipy does
        ranks = average_ranks(scores)
        return float((ranks[positive].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))
    above, below = np.sort(scores[positive]), np.sort(scores[~positive])
    # Each distinct positive score looked up once, counted as often as it occurs (scores rounded
    # to a few digits repeat: 2,500,000 of 4 digits against as many, 0.19 s of searches -> 0.01 s).
    starts = np.flatnonzero(np.r_[True, above[1:] != above[:-1]])
    if len(starts) < len(above) // 2:
        counts = np.diff(np.r_[starts, len(above)])
        above = above[starts]
    else:
        counts = np.ones(len(above), dtype=np.int64)
    lower = below.searchsorted(above, "left")
    upper = below.searchsorted(above, "right")
    twice_u = 2 * int((lower * counts).sum(dtype=np.int64)) + int(
        ((upper - lower) * counts).sum(dtype=np.int64)
    )
    return float(twice_u / (2 * n_pos * n_neg))


def average_ranks(values: np.ndarray) -> np.ndarray:
    """1-based ranks, ties given their mean rank: scipy's ``rankdata`` (method "average"),
    value for value (every rank is an integer or a half, exact in float64), without importing
    scipy.stats, which cost the first check of a process 0.6–1.1 s for this one call."""
    # Ties all take their run's mean rank, whatever their order in it: no stable sort needed.
    order = np.argsort(values)
    ordered = values[order]
    # the start of each run of equal values, then each value's run (dense rank - 1)
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    ends = np.r_[starts[1:], ordered.size]  # one past each run
    run = np.cumsum(np.r_[False, ordered[1:] != ordered[:-1]])
    ranks = np.empty(values.size, dtype="float64")
    ranks[order] = ((starts + 1 + ends) / 2)[run]
    return ranks


def roc_auc(true_codes: np.ndarray, probabilities: np.ndarray) -> float | None:
    """Binary AUC of the second class, else one-vs-rest macro AUC (None if a class is absent)."""
    if probabilities.shape[1] == 2:
        return _binary_auc(probabilities[:, 1], true_codes == 1)
    aucs = [_binary_auc(probabilities[:, c], true_codes == c) for c in range(probabilities.shape[1])]
    defined = [a for a in aucs if a is not None]
    return float(np.mean(defined)) if len(defined) == len(aucs) else None


def log_loss(true_codes: np.ndarray, probabilities: np.ndarray) -> float:
    """Mean negative log-likelihood of the true class; probabilities clipped away from 0."""
    eps = np.finfo(np.float64).eps
    p_true = np.clip(probabilities[np.arange(true_codes.size), true_codes], eps, 1.0)
    return float(-np.mean(np.log(p_true)))


def _probability_matrix(probabilities: Any, n: int, k: int) -> np.ndarray:
    matrix = np.asarray(probabilities, dtype="float64")
    if matrix.shape != (n, k):
        raise ValueError(f"probabilities must have shape ({n}, {k}) in `classes` order, got {matrix.shape}")
    return matrix


def classification_metrics(
    y_true: Any,
    y_pred: Any,
    *,
    classes: Sequence[Any],
    probabilities: Any | None = None,
    bootstrap_resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> ClassificationMetrics:
    """Accuracy (Wilson 95% CI), precision/recall/F1 macro and per class, macro-F1 bootstrap CI,
    and ROC AUC / log loss when ``probabilities`` (n x len(classes), ``classes`` order) are given.
    """
    k = len(classes)
    true_codes, pred_codes = _codes(y_true, classes, "y_true"), _codes(y_pred, classes, "y_pred")
    n = int(true_codes.size)
    if n == 0:
        return {"n": 0, "accuracy": None, "accuracy_ci": [None, None], "per_class": {}}
    confusion = confusion_matrix(true_codes, pred_codes, k)
    precision, recall, f1 = _prf(confusion)
    correct = int(np.trace(confusion))
    result: ClassificationMetrics = {
        "n": n,
        "accuracy": correct / n,
        "accuracy_ci": wilson_interval(correct, n),
        "precision_macro": float(precision.mean()),
        "recall_macro": float(recall.mean()),
        "f1_macro": float(f1.mean()),
        "f1_macro_ci": _bootstrap_macro_f1(confusion, bootstrap_resamples, seed),
        "per_class": _per_class(classes, precision, recall, f1, confusion.sum(axis=1)),
        "confusion_matrix": confusion.tolist(),
        "roc_auc": None,
        "log_loss": None,
    }
    if k == 2:
        result["precision"], result["recall"], result["f1"] = (
            float(precision[1]),
            float(recall[1]),
            float(f1[1]),
        )
    if probabilities is not None:
        matrix = _probability_matrix(probabilities, n, k)
        result["roc_auc"] = roc_auc(true_codes, matrix)
        result["log_loss"] = _json(log_loss(true_codes, matrix))
    return result


def _per_class(
    classes: Sequence[Any],
    precision: np.ndarray,
    recall: np.ndarray,
    f1: np.ndarray,
    support: np.ndarray,
) -> dict[str, ClassMetrics]:
    # Keys are strings: JSON object keys must be, and the dashboard shows them as labels.
    return {
        str(c): {"precision": float(p), "recall": float(r), "f1": float(f), "support": int(s)}
        for c, p, r, f, s in zip(classes, precision, recall, f1, support, strict=True)
    }


def _regression_values(errors: np.ndarray, y_true: np.ndarray) -> tuple[np.ndarray, ...]:
    """MAE, RMSE, R² along the last axis (so a batch of resamples is one call)."""
    mae = np.abs(errors).mean(axis=-1)
    sse = np.square(errors).sum(axis=-1)
    rmse = np.sqrt(sse / errors.shape[-1])
    sst = np.square(y_true - y_true.mean(axis=-1, keepdims=True)).sum(axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        r2 = np.where(sst > 0, 1 - sse / sst, np.nan)
    return mae, rmse, r2


def _bootstrap_regression(errors: np.ndarray, y_true: np.ndarray, resamples: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    chunk = max(1, _BOOTSTRAP_CHUNK_ROWS // errors.size)
    out = []
    for start in range(0, resamples, chunk):  # a loop over resample chunks, not rows
        idx = rng.integers(0, errors.size, size=(min(chunk, resamples - start), errors.size))
        out.append(np.stack(_regression_values(errors[idx], y_true[idx]), axis=1))
    return np.concatenate(out)


def regression_metrics(
    y_true: Any,
    y_pred: Any,
    *,
    bootstrap_resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> RegressionMetrics:
    """MAE, RMSE, MSE, R² with percentile-bootstrap 95% CIs for MAE, RMSE and R² (R² is None for
    a constant target)."""
    truth, pred = np.asarray(y_true, dtype="float64"), np.asarray(y_pred, dtype="float64")
    if truth.shape != pred.shape:
        raise ValueError(f"y_true and y_pred differ in shape: {truth.shape} vs {pred.shape}")
    if truth.size == 0:
        return {"n": 0, "mae": None, "rmse": None, "r2": None}
    errors = truth - pred
    mae, rmse, r2 = _regression_values(errors, truth)
    boot = _bootstrap_regression(errors, truth, bootstrap_resamples, seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN R² column: constant target
        low, high = np.nanpercentile(boot, [2.5, 97.5], axis=0)
    return {
        "n": int(truth.size),
        "mae": _json(float(mae)),
        "rmse": _json(float(rmse)),
        "mse": _json(float(np.mean(np.square(errors)))),
        "r2": _json(float(r2)),
        "mae_ci": _interval(low[0], high[0]),
        "rmse_ci": _interval(low[1], high[1]),
        "r2_ci": _interval(low[2], high[2]),
    }


def _utc(times: Any) -> pd.Series:
    """Times as a UTC Series: aware ones as they are (parsing 10M aware times again through
    ``to_datetime``, which looks for repeats to cache, took 1.6 s a column), others parsed."""
    series = pd.Series(times, copy=False)
    if isinstance(series.dtype, pd.DatetimeTZDtype):
        return series.dt.tz_convert("UTC")
    return pd.to_datetime(series, utc=True)


def _ns(times: pd.Series) -> np.ndarray:
    """Aware times as nanoseconds since the epoch (a view where they are in ns already: pandas'
    ``as_unit`` copied 10M of them, 0.12 s a column)."""
    values = times.array
    return (values if values.unit == "ns" else values.as_unit("ns")).asi8


def label_stats(prediction_times: Any, label_times: Any) -> LabelStats:
    """Label coverage and delay of a window: ``label_times`` is NaT where no label arrived yet.

    Delays are in seconds (median, p90, max) over the labelled samples; a label may arrive
    before its prediction is logged, which gives a negative delay and is kept as such.
    """
    predicted, labelled = _utc(prediction_times), _utc(label_times)
    if len(predicted) != len(labelled):
        raise ValueError("prediction_times and label_times differ in length")
    has_label = labelled.notna().to_numpy()
    # In nanoseconds as integers, then seconds as total_seconds() gives them (ns / 1e9), without
    # pandas' masked Series (two of 10M rows: 0.5 s).
    at_ns = _ns(labelled)[has_label] - _ns(predicted)[has_label]
    delays = at_ns / 1_000_000_000
    n = len(predicted)
    quantiles = np.quantile(delays, [0.5, 0.9]) if delays.size else [np.nan, np.nan]
    return {
        "n": n,
        "n_labelled": int(has_label.sum()),
        "label_coverage": float(has_label.mean()) if n else None,
        "label_delay_median_s": _json(float(quantiles[0])),
        "label_delay_p90_s": _json(float(quantiles[1])),
        "label_delay_max_s": _json(float(delays.max())) if delays.size else None,
    }
