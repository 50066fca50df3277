"""Label-free estimates (CBPE accuracy, DLE MAE) and multivariate drift (PCA reconstruction), measured.

    python bench/estimates.py            # 5 seeds
    python bench/estimates.py --seeds 3

CBPE: a binary model that predicts 1 only when p >= 0.65 (as NannyML's car-loan model), reference
20,000 rows, 20 chunks of 5,000 shifted by -0.5 .. 0.5 sd: mean |estimate - realised accuracy| of
the logged predictions, scoring the logged predictions and (what was scored before) the argmax.
DLE: a regressor that is exact for x < 0 and increasingly wrong above (heteroscedastic error),
reference at x ~ N(0, 1), windows of 1,000 rows shifted by 0 .. 1.5 sd: the estimated MAE beside
the realised MAE. Multivariate: two features whose correlation flips from +0.9 to -0.9 while
every marginal stays N(0, 1) (plus an independent numerical and a categorical feature): how
often the PCA signal fires, how often any univariate test fires, and the false-alarm rate on
clean windows. Exit status 0 when the targets are met.
"""

import argparse
import statistics
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from workers.drift import data_drift  # noqa: E402
from workers.drift.dle import estimate_mae, fit_loss_estimator  # noqa: E402
from workers.drift.estimation import estimate_accuracy, fit_confidence_calibrator  # noqa: E402
from workers.drift.multivariate import fit_pca_drift, multivariate_drift  # noqa: E402

SHIFTS = (0.0, 0.5, 1.0, 1.5)
WINDOW = 1000
CLEAN_WINDOWS = 100  # per seed
REG_TYPES = {"x": "numerical", "z": "numerical", "segment": "categorical"}
MV_TYPES = {"a": "numerical", "b": "numerical", "c": "numerical", "segment": "categorical"}


def regression_frame(n: int, seed: int, x_mean: float) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    x, z = rng.normal(x_mean, 1, n), rng.normal(0, 1, n)
    truth = 2 * x + z
    prediction = truth + rng.normal(0, 0.1 + np.clip(x, 0, None), n)
    segment = rng.choice(["a", "b"], n)
    return pd.DataFrame({"x": x, "z": z, "segment": segment, "pred": prediction, "label": truth})


def correlated_frame(n: int, seed: int, correlation: float) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    a = rng.normal(0, 1, n)
    b = correlation * a + np.sqrt(1 - correlation**2) * rng.normal(0, 1, n)
    segment = rng.choice(["x", "y", "z"], n, p=[0.5, 0.3, 0.2])
    return pd.DataFrame({"a": a, "b": b, "c": rng.normal(0, 1, n), "segment": segment})


def thresholded(rng: np.random.Generator, n: int, x_mean: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    x = rng.normal(x_mean, 1.0, n)
    labels = (rng.random(n) < 1 / (1 + np.exp(-2 * x))).astype(int)
    p1 = 1 / (1 + np.exp(-3 * x))  # overconfident, and thresholded at 0.65
    return np.column_stack([1 - p1, p1]), labels, (p1 >= 0.65).astype(int)


def run_cbpe(seeds: list[int]) -> bool:
    print("== CBPE: estimated vs realised accuracy of the logged predictions, 20 chunks of 5,000 rows")
    errors: dict[str, list[float]] = {"logged": [], "argmax": []}
    for seed in seeds:
        rng = np.random.default_rng(seed)
        proba, labels, predicted = thresholded(rng, 20_000, 0.0)
        calibrator = fit_confidence_calibrator(proba, labels, [0, 1], reference_predictions=predicted)
        for shift in np.linspace(-0.5, 0.5, 20):
            proba, labels, predicted = thresholded(rng, 5000, float(shift))
            realised = float(np.mean(predicted == labels))
            for name, scored in (("logged", predicted), ("argmax", proba.argmax(axis=1))):
                errors[name].append(estimate_accuracy(calibrator, proba, scored)[0] - realised)
    for name, values in errors.items():
        e = np.array(values)
        print(f"scoring {name:>6}: mean error {e.mean():+.5f}  mean |error| {np.abs(e).mean():.5f}")
    ok = abs(float(np.mean(errors["logged"]))) <= 0.002
    print(f"target: |bias| of the logged-prediction estimate <= 0.002: {'MET' if ok else 'NOT MET'}\n")
    return ok


def run_dle(seeds: list[int]) -> bool:
    print(f"== DLE: estimated vs realised MAE, windows of {WINDOW} rows, reference 5,000 rows")
    print(f"{'shift':>6} | {'realised':>9} {'estimated':>9} {'error':>8} {'|rel err|':>9} {'in 95% CI':>9}")
    worst = 0.0
    # One estimator per seed, fitted once on that seed's reference and reused for every shift.
    estimators = {
        s: fit_loss_estimator(regression_frame(5000, 100 + s, 0.0), REG_TYPES, "pred", "label") for s in seeds
    }
    for shift in SHIFTS:
        realised, estimated, inside = [], [], 0
        for seed in seeds:
            estimator = estimators[seed]
            assert estimator is not None
            window = regression_frame(WINDOW, 200 + seed, shift)
            value, low, high = estimate_mae(estimator, window)
            truth = float((window["label"] - window["pred"]).abs().mean())
            realised.append(truth)
            estimated.append(value)
            inside += low <= truth <= high
        errors = np.array(estimated) - np.array(realised)
        relative = float(np.mean(np.abs(errors) / np.array(realised)))
        worst = max(worst, relative) if shift <= 1.0 else worst
        print(
            f"{shift:>6.1f} | {np.mean(realised):>9.4f} {np.mean(estimated):>9.4f} {np.mean(errors):>+8.4f} "
            f"{relative:>9.1%} {inside:>6}/{len(seeds)}"
        )
    ok = worst <= 0.10
    print(
        f"target: mean |relative error| <= 10% for shifts up to 1 sd: {worst:.1%}: {'MET' if ok else 'NOT MET'}"
    )
    return ok


def run_multivariate(seeds: list[int]) -> bool:
    print(f"\n== multivariate: correlation of a and b flips +0.9 -> -0.9, windows of {WINDOW} rows")
    caught, univariate, false_alarms, clean = 0, 0, 0, 0
    scores = []
    for seed in seeds:
        reference = correlated_frame(5000, 300 + seed, 0.9)
        model = fit_pca_drift(reference, MV_TYPES)
        assert model is not None
        flipped = correlated_frame(WINDOW, 400 + seed, -0.9)
        result = multivariate_drift(model, flipped)
        caught += result["drifted"]
        scores.append(result["score"] / result["threshold"])
        univariate += any(c.drifted for c in data_drift(reference, flipped, MV_TYPES).columns.values())
        for k in range(CLEAN_WINDOWS):
            false_alarms += multivariate_drift(model, correlated_frame(WINDOW, 10_000 * (seed + 1) + k, 0.9))[
                "drifted"
            ]
            clean += 1
    n = len(seeds)
    print(
        f"flipped windows caught by the PCA signal : {caught}/{n}  (score / upper threshold: median {statistics.median(scores):.2f})"
    )
    print(f"flipped windows with any univariate drift: {univariate}/{n}")
    print(f"false alarms on clean windows            : {false_alarms}/{clean} = {false_alarms / clean:.2%}")
    ok = caught == n and univariate == 0 and false_alarms / clean <= 0.01
    print(
        f"target: every flip caught, no univariate test fires, false alarms <= 1%: {'MET' if ok else 'NOT MET'}"
    )
    return ok


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", type=int, default=5)
    args = parser.parse_args()
    seeds = list(range(args.seeds))
    ok = run_cbpe(seeds)
    ok = run_dle(seeds) and ok
    ok = run_multivariate(seeds) and ok
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
