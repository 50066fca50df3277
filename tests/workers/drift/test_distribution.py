"""Stored distributions of one column, reference vs window, and their effect sizes."""

import json

import numpy as np
import pandas as pd
import pytest
from scipy.stats.contingency import association

from workers.drift.distribution import (
    BINS,
    OTHER,
    TOP_CATEGORIES,
    column_distribution,
    cramers_v,
    psi,
    sorted_quantile,
)
from workers.drift.engine import column_drift
from workers.drift.summary import CategoricalSummary, category_counts, summarize_numerical


def _numerical(reference: np.ndarray, current: np.ndarray):
    summary = summarize_numerical(pd.Series(reference))
    return column_distribution(summary, pd.Series(current), "numerical"), summary


def test_a_numerical_column_is_a_histogram_over_both_sides_counting_every_row() -> None:
    rng = np.random.default_rng(0)
    dist, _ = _numerical(rng.normal(size=3000), rng.normal(3, 1, size=500))
    assert len(dist["labels"]) == BINS and len(dist["edges"]) == BINS + 1
    assert sum(dist["reference"]) == pytest.approx(1) and sum(dist["current"]) == pytest.approx(1)
    assert dist["edges"][0] < -1.5 and dist["edges"][-1] > 4.5  # spans both distributions
    assert (dist["n_reference"], dist["n_current"]) == (3000, 500)
    json.dumps(dist, allow_nan=False)  # storable as is


def test_the_same_distribution_has_near_zero_effect_and_a_shift_a_large_one() -> None:
    rng = np.random.default_rng(1)
    reference = rng.normal(size=5000)
    same, _ = _numerical(reference, rng.normal(size=2000))
    shifted, _ = _numerical(reference, rng.normal(1.5, 1, size=2000))
    assert same["psi"] < 0.05 and same["wasserstein_norm"] < 0.1
    assert shifted["psi"] > 0.25 and shifted["wasserstein_norm"] == pytest.approx(1.5, abs=0.1)


def test_the_wasserstein_effect_is_the_engines_score_when_the_engine_uses_it() -> None:
    rng = np.random.default_rng(2)
    reference, current = rng.normal(size=5000), rng.normal(0.4, 1.2, size=800)
    dist, summary = _numerical(reference, current)
    drift = column_drift(summary, pd.Series(current), "numerical")
    assert drift.method == "wasserstein"
    assert dist["wasserstein_norm"] == pytest.approx(drift.score, rel=1e-12)


def test_a_constant_column_gets_one_unit_of_range_instead_of_empty_bins() -> None:
    dist, _ = _numerical(np.full(100, 7.0), np.full(50, 7.0))
    assert dist["edges"][0] == 6.5 and dist["edges"][-1] == 7.5 and dist["psi"] == pytest.approx(0)


def test_categories_keep_the_top_ones_and_fold_the_rest_into_other() -> None:
    reference = pd.Series([f"c{i}" for i in range(20) for _ in range(20 - i)])
    current = pd.Series(["c0"] * 50 + ["new"] * 50)
    dist = column_distribution(CategoricalSummary(category_counts(reference)), current, "categorical")
    assert dist["labels"][:2] == ["c0", "c1"] and dist["labels"][-1] == OTHER
    assert len(dist["labels"]) == TOP_CATEGORIES + 1
    assert sum(dist["reference"]) == pytest.approx(1) and sum(dist["current"]) == pytest.approx(1)
    assert dist["current"][-1] == pytest.approx(0.5)  # "new" is not in the top: counted in other
    assert dist["edges"] == [] and dist["wasserstein_norm"] is None


def test_cramers_v_matches_scipy() -> None:
    ref, cur = np.array([50, 30, 20]), np.array([10, 30, 60])
    assert cramers_v(ref, cur) == pytest.approx(association(np.vstack([ref, cur]), method="cramer"))
    assert cramers_v(ref, ref * 3) == pytest.approx(0)


def test_psi_is_the_textbook_sum() -> None:
    ref, cur = np.array([25, 25, 50]), np.array([50, 25, 25])
    r, c = np.array([0.25, 0.25, 0.5]), np.array([0.5, 0.25, 0.25])
    assert psi(ref, cur) == pytest.approx(float(np.sum((c - r) * np.log(c / r))))


def test_an_empty_side_has_no_distribution() -> None:
    summary = summarize_numerical(pd.Series([1.0, 2.0]))
    assert column_distribution(summary, pd.Series([np.nan, np.inf]), "numerical") is None
    assert column_distribution(CategoricalSummary({"a": 3}), pd.Series([None]), "categorical") is None


def test_a_sorted_columns_quantile_is_numpys_bit_for_bit() -> None:
    """The drill-down's edges read a sorted column's percentiles off it: the same float as
    np.quantile's partition and interpolation, at every size (1 and 2 values, ties, large
    magnitudes) and every q, the edge ones and those landing exactly on a value included."""
    rng = np.random.default_rng(11)
    sizes = [1, 2, 3, 7, 100, 101, 1000, 12_345]
    for size in sizes:
        for scale in (1.0, 1e-300, 1e300):
            values = np.sort(np.round(rng.standard_cauchy(size), int(rng.integers(0, 4))) * scale)
            qs = [
                0.0,
                0.01,
                0.5,
                0.99,
                1.0,
                *rng.random(20),
                *(k / max(size - 1, 1) for k in range(min(size, 5))),
            ]
            for q in qs:
                want, got = np.quantile(values, q), sorted_quantile(values, q)
                assert got == want or (np.isnan(got) and np.isnan(want)), (size, scale, q, got, want)
    # Halfway between two values numpy interpolates from the upper one: both ways differ in the last bit.
    for a, b in np.sort(rng.standard_normal((2000, 2)) * 10.0 ** rng.integers(-5, 6, (2000, 1)), axis=1):
        pair = np.array([a, b])
        assert sorted_quantile(pair, 0.5) == np.quantile(pair, 0.5), (a, b)
    with pytest.raises(ValueError):
        sorted_quantile(np.array([1.0, 2.0]), 1.5)
