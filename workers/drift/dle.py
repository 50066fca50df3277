"""Label-free MAE estimate for regressors: direct loss estimation (as NannyML's DLE).

A small gradient-boosted model learns the absolute error |label - prediction| from the features
and the prediction on the labelled reference; a window's estimated MAE is the mean of its
predicted absolute errors. Like CBPE it holds under covariate shift as long as the error's
dependence on the inputs does not change; it cannot see pure concept drift.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from workers.drift.estimation import Estimate
from workers.drift.quality import Z_95
from workers.drift.stats import SampleDict
from workers.features.registry import feature_type

MIN_REFERENCE_ROWS = 100
MIN_LEAF_ROWS = 100
SEED = 0  # fixed, so a check recomputed in another process gives the same estimate
# Below this many rows the trees are grown and read on one OpenMP thread. On a busy 2-core machine
# (a worker beside the web server and other workers) 5,000 reference rows fit in 2.9 s on one
# thread, 4.8 s on two passive ones and 38 s on two of libgomp's default spinning ones, which wait
# for each other's time slices: the split search over a few columns is too short to share.
SINGLE_THREAD_ROWS = 100_000


@dataclass(frozen=True)
class LossEstimator:
    """|error| (and error², for MSE and RMSE) as functions of (features, prediction), fitted on
    the reference."""

    model: Any  # sklearn HistGradientBoostingRegressor of |error|
    categories: dict[str, list[Any]]  # categorical column -> its reference categories
    columns: list[str]  # model inputs, in order (features, then the prediction)
    residual_sd: float  # sd of (|error| - predicted |error|) on held-out reference rows
    squared_model: Any = None  # of error²; None for an estimator pickled before it existed
    squared_residual_sd: float = 0.0

    def predict(self, frame: pd.DataFrame) -> np.ndarray:
        with _threads_for(len(frame)):
            return np.clip(self.model.predict(_encode(frame, self.columns, self.categories)), 0.0, None)

    def predict_squared(self, frame: pd.DataFrame) -> np.ndarray:
        with _threads_for(len(frame)):
            return np.clip(
                self.squared_model.predict(_encode(frame, self.columns, self.categories)), 0.0, None
            )


@contextmanager
def _threads_for(rows: int) -> Iterator[None]:
    """One OpenMP thread for the trees below SINGLE_THREAD_ROWS rows, the process's default above."""
    if rows >= SINGLE_THREAD_ROWS:
        yield
        return
    # A limit reaches only the libraries loaded when it is set: the trees' OpenMP runtime comes
    # with this import, which a fresh worker's first fit otherwise made inside the limit, so
    # its fits ran on libgomp's two spinning threads (a 20,000-row reference: 1.0-4.0 s of fits
    # under load, 0.15-0.27 s on one thread).
    import sklearn.ensemble  # noqa: F401
    from threadpoolctl import threadpool_limits  # scikit-learn's own dependency

    with threadpool_limits(limits=1, user_api="openmp"):
        yield


def _encode(frame: pd.DataFrame, columns: list[str], categories: dict[str, list[Any]]) -> pd.DataFrame:
    """Numbers as float (NaN allowed); categoricals as the code of their reference category
    (NaN when missing or unseen), split on like numbers: on the car-price data that reads 15%
    closer to the realised MAE than native categorical splits."""
    out = pd.DataFrame(index=frame.index)
    for name in columns:
        if name in categories:
            codes = pd.Categorical(frame[name].astype("object"), categories=categories[name]).codes
            out[name] = np.where(codes >= 0, codes, np.nan)
        else:
            out[name] = pd.to_numeric(frame[name], errors="coerce").astype("float64")
    return out


def _regressor() -> Any:
    # Imported here: scikit-learn (~1 s) is only needed on the worker path that fits it.
    from sklearn.ensemble import HistGradientBoostingRegressor

    # LightGBM's defaults, which NannyML's DLE fits (num_leaves 31, 100 rounds at 0.1, 255 bins,
    # no early stopping), except leaves of >= 100 rows, not 20: a loss is heavy-tailed, and a
    # leaf's mean |error| needs rows behind it (car price: mean error 8.66 against 9.54 with 20,
    # NannyML's 9.01). scikit-learn's "auto" early stopping held out 10% and stopped short, and
    # 15 leaves underfit (1.56x NannyML's error before).
    return HistGradientBoostingRegressor(
        max_iter=100,
        learning_rate=0.1,
        max_leaf_nodes=31,
        min_samples_leaf=MIN_LEAF_ROWS,
        max_bins=255,
        early_stopping=False,
        random_state=SEED,
    )


def fit_loss_estimator(
    frame: pd.DataFrame, feature_types: dict[str, str], prediction: str, label: str
) -> LossEstimator | None:
    """Fit on the labelled reference rows; None when there are too few of them."""
    rows = frame[frame[label].notna() & frame[prediction].notna()]
    if len(rows) < MIN_REFERENCE_ROWS:
        return None
    encodings = {n: feature_type(t).encoding for n, t in feature_types.items()}
    categories = {
        n: sorted(rows[n].dropna().astype("object").unique().tolist(), key=str)
        for n, encoding in encodings.items()
        if encoding == "category"
    }
    columns = [*(n for n, encoding in encodings.items() if encoding is not None), prediction]
    x = _encode(rows, columns, categories)
    error = (rows[label].astype("float64") - rows[prediction].astype("float64")).to_numpy()
    with _threads_for(len(x)):
        absolute, absolute_sd = _fit_target(x, np.abs(error))
        squared, squared_sd = _fit_target(x, np.square(error))
    return LossEstimator(absolute, categories, columns, absolute_sd, squared, squared_sd)


def _fit_target(x: pd.DataFrame, target: np.ndarray) -> tuple[Any, float]:
    """The model of one loss, and its residual sd from a 2-fold cross-fit (so the interval is not
    judged on training rows)."""
    order = np.random.default_rng(SEED).permutation(len(x))
    halves = order[: len(x) // 2], order[len(x) // 2 :]
    residuals = []
    for train, test in (halves, halves[::-1]):
        fitted = _regressor().fit(x.iloc[train], target[train])
        residuals.append(target[test] - np.clip(fitted.predict(x.iloc[test]), 0.0, None))
    return _regressor().fit(x, target), float(np.std(np.concatenate(residuals)))


def estimate_mae(estimator: LossEstimator, frame: pd.DataFrame) -> tuple[float, float, float]:
    """Estimated MAE of a window from features and predictions alone: (estimate, low, high).

    The 95% interval is the spread of a window's realised MAE around its expectation: the
    held-out residual sd over sqrt(n).
    """
    if len(frame) == 0:
        raise ValueError("no rows in the window")
    found = _loss_estimate(estimator.predict(frame), estimator.residual_sd, len(frame))
    return found.value, found.low, found.high


def _loss_estimate(predicted: np.ndarray, residual_sd: float, of: int) -> Estimate:
    """The mean of the rows' predicted losses and its 95% interval: a window's realised loss
    spreads around its expectation by the held-out residual sd over sqrt(n); a mean taken on a
    uniform sample of m of the window's ``of`` rows (drawn without replacement) adds its
    sampling variance, S² / m · (1 - m / of), S² the sample's variance of the predicted losses
    (design-based: exact whatever the rows' dependence), which is the sample's stated error."""
    value, m = float(predicted.mean()), len(predicted)
    if m == of:
        half = Z_95 * residual_sd / np.sqrt(of)
        return Estimate(value, max(0.0, value - half), value + half)
    sampling = float(predicted.var(ddof=1)) / m * (1 - m / of)
    half = Z_95 * float(np.sqrt(residual_sd**2 / of + sampling))
    sample: SampleDict = {"rows": m, "of": of, "error": float(np.sqrt(sampling))}
    return Estimate(value, max(0.0, value - half), value + half, sample)


REGRESSOR_METRICS = ("mae", "mse", "rmse")


def estimate_regressor_metrics(estimator: LossEstimator, frame: pd.DataFrame) -> dict[str, Estimate]:
    """DLE's MAE, MSE and RMSE of a window, each with its 95% interval (RMSE: the MSE's, rooted).
    An estimator fitted before the squared-error model existed estimates MAE only."""
    return estimate_regressor_metrics_by_block(estimator, [frame])


def estimate_regressor_metrics_by_block(
    estimator: LossEstimator, blocks: Iterable[pd.DataFrame], *, of: int | None = None
) -> dict[str, Estimate]:
    """The same over a window given as blocks of its rows, each let go once its losses are
    predicted: a row's predicted losses are its own (the trees read one row at a time), kept
    in one array, so the estimates are those of the window read whole, to the last bit.
    ``of``: the blocks are a uniform sample of a window of that many rows (``_loss_estimate``);
    RMSE's stated error is then the MSE's carried through the root (its first-order term)."""
    absolute, squared = [], []
    for block in blocks:
        absolute.append(estimator.predict(block))
        if estimator.squared_model is not None:
            squared.append(estimator.predict_squared(block))
    rows = sum(len(a) for a in absolute)
    if not rows:
        raise ValueError("no rows in the window")
    out = {"mae": _loss_estimate(np.concatenate(absolute), estimator.residual_sd, of or rows)}
    if estimator.squared_model is None:
        return out
    mse = _loss_estimate(np.concatenate(squared), estimator.squared_residual_sd, of or rows)
    out["mse"] = mse
    root = float(np.sqrt(mse.value))
    sample: SampleDict | None = None
    if mse.sample is not None:
        sample = {
            **mse.sample,
            "error": mse.sample["error"] / (2 * root) if root else float(np.sqrt(mse.sample["error"])),
        }
    out["rmse"] = Estimate(root, float(np.sqrt(mse.low)), float(np.sqrt(mse.high)), sample)
    return out
