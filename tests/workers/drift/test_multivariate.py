"""Multivariate drift (PCA reconstruction error): a flipped correlation that no univariate test sees."""

import numpy as np
import pandas as pd

from workers.drift import data_drift
from workers.drift.multivariate import fit_pca_drift, multivariate_drift

TYPES = {"a": "numerical", "b": "numerical", "c": "numerical", "segment": "categorical"}


def frame(n: int, *, seed: int, correlation: float) -> pd.DataFrame:
    """a and b standard normal with the given correlation; c and segment independent of them."""
    rng = np.random.default_rng(seed)
    a = rng.normal(0, 1, n)
    b = correlation * a + np.sqrt(1 - correlation**2) * rng.normal(0, 1, n)
    return pd.DataFrame(
        {
            "a": a,
            "b": b,
            "c": rng.normal(0, 1, n),
            "segment": rng.choice(["x", "y", "z"], n, p=[0.5, 0.3, 0.2]),
        }
    )


def test_a_flipped_correlation_is_multivariate_drift_while_no_univariate_test_fires() -> None:
    reference = frame(5000, seed=1, correlation=0.9)
    current = frame(1000, seed=2, correlation=-0.9)
    univariate = data_drift(reference, current, TYPES)
    assert not any(c.drifted for c in univariate.columns.values())
    model = fit_pca_drift(reference, TYPES)
    assert model is not None
    result = multivariate_drift(model, current)
    assert result["drifted"] is True and result["score"] > result["threshold"]
    assert result["higher_is_drift"] is True  # stored with the score: readers never guess the direction


def test_clean_windows_rarely_cross_the_band() -> None:
    model = fit_pca_drift(frame(5000, seed=1, correlation=0.9), TYPES)
    assert model is not None
    alarms = [
        multivariate_drift(model, frame(500, seed=100 + s, correlation=0.9))["drifted"] for s in range(200)
    ]
    assert sum(alarms) <= 4, f"{sum(alarms)} false alarms in 200 clean windows"
