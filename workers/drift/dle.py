"""Label-free MAE estimate for regressors: direct loss estimation (as NannyML's DLE).

A small gradient-boosted model learns the absolute error |label - prediction| from the features
and the prediction on the labelled reference; a window's estimated MAE is the mean of its
predicted absolute errors. Like CBPE it holds under covariate shift as long as the error's
dependence on the inputs does not change; it cannot see pure concept drift.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from workers.drift.quality import Z_95
from workers.features.registry import feature_type

MIN_REFERENCE_ROWS = 100
SEED = 0  # fixed, so a check recomputed in another process gives the same estimate


@dataclass(frozen=True)
class LossEstimator:
    """|error| as a function of (features, prediction), fitted on the reference."""

    model: Any  # sklearn HistGradientBoostingRegressor
    categories: dict[str, list[Any]]  # categorical column -> its reference categories
    columns: list[str]  # model inputs, in order (features, then the prediction)
    residual_sd: float  # sd of (|error| - predicted |error|) on held-out reference rows

    def predict(self, frame: pd.DataFrame) -> np.ndarray:
        return np.clip(self.model.predict(_encode(frame, self.columns, self.categories)), 0.0, None)


def _encode(frame: pd.DataFrame, columns: list[str], categories: dict[str, list[Any]]) -> pd.DataFrame:
    """Numbers as float (NaN allowed), categoricals as pandas categories of the reference's values."""
    out = pd.DataFrame(index=frame.index)
    for name in columns:
        if name in categories:
            out[name] = pd.Categorical(frame[name].astype("object"), categories=categories[name])
        else:
            out[name] = pd.to_numeric(frame[name], errors="coerce").astype("float64")
    return out


def _regressor() -> Any:
    # Imported here: scikit-learn (~1 s) is only needed on the worker path that fits it.
    from sklearn.ensemble import HistGradientBoostingRegressor

    return HistGradientBoostingRegressor(
        max_iter=100,
        learning_rate=0.1,
        max_leaf_nodes=15,
        categorical_features="from_dtype",
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
    target = (rows[label].astype("float64") - rows[prediction].astype("float64")).abs().to_numpy()
    # Residual spread from a 2-fold cross-fit, so the interval is not judged on training rows.
    order = np.random.default_rng(SEED).permutation(len(rows))
    halves = order[: len(rows) // 2], order[len(rows) // 2 :]
    residuals = []
    for train, test in (halves, halves[::-1]):
        fitted = _regressor().fit(x.iloc[train], target[train])
        residuals.append(target[test] - np.clip(fitted.predict(x.iloc[test]), 0.0, None))
    model = _regressor().fit(x, target)
    return LossEstimator(model, categories, columns, float(np.std(np.concatenate(residuals))))


def estimate_mae(estimator: LossEstimator, frame: pd.DataFrame) -> tuple[float, float, float]:
    """Estimated MAE of a window from features and predictions alone: (estimate, low, high).

    The 95% interval is the spread of a window's realised MAE around its expectation: the
    held-out residual sd over sqrt(n).
    """
    if len(frame) == 0:
        raise ValueError("no rows in the window")
    predicted = estimator.predict(frame)
    value = float(predicted.mean())
    half = Z_95 * estimator.residual_sd / np.sqrt(len(frame))
    return value, max(0.0, value - half), value + half
