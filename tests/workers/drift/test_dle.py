"""Direct loss estimation: the label-free MAE of a regressor follows the realised MAE under
covariate shift, where the error depends on the inputs."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from workers.drift.dle import estimate_mae, estimate_regressor_metrics, fit_loss_estimator

TYPES = {"x": "numerical", "z": "numerical", "segment": "categorical"}


def frame(n: int, *, seed: int, x_mean: float) -> pd.DataFrame:
    """The model is exact for x < 0 and increasingly wrong (heteroscedastic noise) for x > 0."""
    rng = np.random.default_rng(seed)
    x = rng.normal(x_mean, 1, n)
    z = rng.normal(0, 1, n)
    truth = 2 * x + z
    prediction = truth + rng.normal(0, 0.1 + np.clip(x, 0, None), n)
    segment = rng.choice(["a", "b"], n)
    return pd.DataFrame({"x": x, "z": z, "segment": segment, "pred": prediction, "label": truth})


def realised_mae(f: pd.DataFrame) -> float:
    return float((f["label"] - f["pred"]).abs().mean())


def test_estimated_mae_follows_the_realised_mae_under_covariate_shift() -> None:
    estimator = fit_loss_estimator(frame(5000, seed=1, x_mean=0.0), TYPES, "pred", "label")
    assert estimator is not None
    for seed, shift in enumerate((0.0, 0.5, 1.0), start=2):
        current = frame(2000, seed=seed, x_mean=shift)
        value, _, _ = estimate_mae(estimator, current)
        realised = realised_mae(current)
        assert abs(value - realised) < 0.1 * realised, (shift, value, realised)


def test_the_interval_covers_the_realised_mae_without_shift() -> None:
    estimator = fit_loss_estimator(frame(5000, seed=1, x_mean=0.0), TYPES, "pred", "label")
    assert estimator is not None
    covered = []
    for seed in range(10, 30):
        current = frame(1000, seed=seed, x_mean=0.0)
        _, low, high = estimate_mae(estimator, current)
        covered.append(low <= realised_mae(current) <= high)
    assert sum(covered) >= 16, f"{sum(covered)} of 20 windows inside the 95% interval"


def test_the_estimate_rises_with_the_shift_while_a_constant_would_not() -> None:
    estimator = fit_loss_estimator(frame(5000, seed=1, x_mean=0.0), TYPES, "pred", "label")
    assert estimator is not None
    before = estimate_mae(estimator, frame(2000, seed=5, x_mean=0.0))[0]
    after = estimate_mae(estimator, frame(2000, seed=6, x_mean=1.5))[0]
    assert after > 2 * before


def test_too_few_reference_rows_give_no_estimator() -> None:
    assert fit_loss_estimator(frame(50, seed=1, x_mean=0.0), TYPES, "pred", "label") is None


def realised_mse(f: pd.DataFrame) -> float:
    return float(np.square(f["label"] - f["pred"]).mean())


def test_dle_estimates_mse_and_rmse_beside_the_mae() -> None:
    estimator = fit_loss_estimator(frame(5000, seed=1, x_mean=0.0), TYPES, "pred", "label")
    assert estimator is not None
    covered = 0
    for seed, shift in enumerate((0.0, 0.0, 0.0, 0.5, 1.0), start=40):
        current = frame(2000, seed=seed, x_mean=shift)
        estimates = estimate_regressor_metrics(estimator, current)
        mse = estimates["mse"]
        assert abs(mse.value - realised_mse(current)) < 0.15 * realised_mse(current), (shift, mse)
        assert estimates["rmse"].value == pytest.approx(np.sqrt(mse.value))
        assert estimates["mae"].value == estimate_mae(estimator, current)[0]
        covered += mse.low <= realised_mse(current) <= mse.high
    assert covered >= 4


def test_the_loss_model_runs_every_boosting_round_on_a_large_reference() -> None:
    # scikit-learn's default early stopping (on past 10,000 rows) held out 10% and stopped short
    # of the 100 rounds NannyML's LightGBM runs.
    estimator = fit_loss_estimator(frame(12_000, seed=1, x_mean=0.0), TYPES, "pred", "label")
    assert estimator is not None
    assert estimator.model.n_iter_ == 100 and estimator.squared_model.n_iter_ == 100


def test_a_fresh_process_grows_a_small_references_trees_on_one_thread() -> None:
    """The limit must reach the trees' OpenMP runtime even when the first fit imports it."""
    code = (
        "from threadpoolctl import threadpool_info\n"
        "from workers.drift.dle import _threads_for\n"
        "with _threads_for(1000):\n"
        "    print(sorted({i['num_threads'] for i in threadpool_info() if i['user_api'] == 'openmp'}))\n"
    )
    root = Path(__file__).resolve().parents[3]
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[1]"
