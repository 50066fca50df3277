"""Multivariate drift (PCA reconstruction error): a flipped correlation that no univariate test sees."""

import numpy as np
import pandas as pd
import pytest

from workers.drift import data_drift, multivariate, sorts
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


def independent(n: int, rng: np.random.Generator, columns: int = 20) -> pd.DataFrame:
    return pd.DataFrame(rng.normal(size=(n, columns)), columns=[f"x{j}" for j in range(columns)])


def test_a_clean_window_far_larger_than_the_reference_does_not_alarm() -> None:
    """Scored by the PCA fitted on itself, a reference's error is biased low (its components fit
    its own noise): every clean window of 5,000 rows or more alarmed on 20 independent features.
    The reference's error is the PCA's on held-out rows, within their own standard error."""
    types = {f"x{j}": "numerical" for j in range(20)}
    rng = np.random.default_rng(7)
    alarms, z = 0, []
    for _ in range(40):
        model = fit_pca_drift(independent(5000, rng), types)
        assert model is not None
        result = multivariate_drift(model, independent(50_000, rng))
        alarms += result["drifted"]
        z.append((result["score"] - result["reference"]) / ((result["band"][1] - result["reference"]) / 3))
    assert alarms <= 1, f"{alarms} false alarms in 40 clean 50,000-row windows"
    assert 0.6 < float(np.std(z)) < 1.5, z  # the band is the difference's sd, not far wider


def test_a_small_decorrelation_is_still_found_in_a_large_window() -> None:
    reference = frame(5000, seed=1, correlation=0.9)
    model = fit_pca_drift(reference, TYPES)
    assert model is not None
    assert multivariate_drift(model, frame(100_000, seed=3, correlation=0.8))["drifted"] is True
    assert multivariate_drift(model, frame(100_000, seed=4, correlation=0.9))["drifted"] is False


def test_no_multivariate_test_when_every_direction_is_kept() -> None:
    """Two independent columns need both components for 65% of the variance: every row is its
    own reconstruction, and float noise on a band of width 0 was an alarm on nothing."""
    rng = np.random.default_rng(5)
    two = pd.DataFrame({"a": rng.normal(size=1000), "b": rng.normal(size=1000)})
    assert fit_pca_drift(two, {"a": "numerical", "b": "numerical"}) is None


@pytest.mark.parametrize(
    ("block", "threads"), [(multivariate.ERROR_BLOCK_ROWS, False), (1000, False), (700, True)]
)
def test_the_window_errors_are_the_plain_formula_bit_for_bit(
    monkeypatch: pytest.MonkeyPatch, block: int, threads: bool
) -> None:
    # The errors are computed in place and in blocks of rows to spare 160 MB temporaries on a
    # 1M-row window (1000: three whole blocks and a part; 700 on a large window's threads); the
    # decision rides on their mean, so they must stay the textbook expression exactly.
    monkeypatch.setattr(multivariate, "ERROR_BLOCK_ROWS", block)
    if threads:
        monkeypatch.setattr(sorts, "PARALLEL_MIN_ROWS", 1000)
    reference, current = frame(5000, seed=5, correlation=0.5), frame(3000, seed=6, correlation=0.5)
    current.loc[::7, "a"] = np.nan
    model = fit_pca_drift(reference, TYPES)
    assert model is not None
    encoded = [
        current[c].map(model.frequencies[c]) if c in model.frequencies else current[c] for c in model.columns
    ]
    raw = np.column_stack([column.to_numpy(float) for column in encoded])
    z = (raw - model.means) / model.scales
    z[np.isnan(z)] = 0.0
    projected = z @ model.components.T
    expected = np.sqrt(
        np.maximum(np.einsum("ij,ij->i", z, z) - np.einsum("ij,ij->i", projected, projected), 0.0)
    )
    assert "segment" in model.frequencies and np.isnan(raw).any()
    assert np.array_equal(model.errors(current), expected)


def test_frequency_encoding_by_distinct_value_equals_the_lookup_row_by_row() -> None:
    """A categorical column's shares come from its distinct values when they are all strings,
    row by row otherwise (1, 1.0 and True are equal, their texts are not): either way each row
    gets the share of its own text, NaN for None, as a lookup per row gives."""
    from workers.drift.multivariate import _frequency_encoded

    shares = {"a": 0.1, "1": 0.2, "1.0": 0.3, "True": 0.4, "nan": 0.5, "None": 0.6, "<NA>": 0.7}

    def row_by_row(values: np.ndarray) -> np.ndarray:
        return np.array([np.nan if v is None else shares.get(str(v), 0.0) for v in values], dtype="float64")

    rng = np.random.default_rng(2)
    texts = rng.choice(np.array(["a", "b", "1", "nan", "None", None], dtype=object), 5000)
    mixed = np.array(["a", None, 1, 1.0, True, np.nan, "nan", "None", pd.NA, "1", "zz", None], dtype=object)
    for values in (texts, mixed, texts[texts != None], np.array([None, np.nan], dtype=object)):  # noqa: E711
        got = _frequency_encoded(values, shares)
        assert got.dtype == np.float64
        np.testing.assert_array_equal(got, row_by_row(values))


def test_a_categorical_columns_encoding_equals_its_objects_encoding() -> None:
    """A column a source hands over as a pandas Categorical (its codes) encodes as the same
    column of Python strings does: each row its text's share, 0 for one the reference never saw,
    NaN where missing."""
    from workers.drift.multivariate import _encoded

    shares = {"a": 0.25, "b": 0.5, "c": 0.25}
    rng = np.random.default_rng(3)
    objects = pd.Series(rng.choice(np.array(["a", "b", "zz", None], dtype=object), 2000), dtype=object)
    categorical = pd.Series(pd.Categorical(objects, categories=["zz", "b", "a"]))
    assert categorical.isna().sum() == objects.isna().sum() > 0
    np.testing.assert_array_equal(_encoded(categorical, shares), _encoded(objects, shares))
    rows = np.array([5, 0, 17, 1999])
    np.testing.assert_array_equal(
        _encoded(categorical.iloc[rows], shares), _encoded(objects.iloc[rows], shares)
    )


def test_a_very_large_windows_mean_error_from_a_sample_states_its_standard_error_and_widens_the_band(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Past SAMPLE_ABOVE rows (lowered here to 20,000, samples of 20,000: half the window, so
    the finite population's factor counts) the mean error is a uniform sample's: over 150 draws
    its spread around the whole window's mean is the stated standard error (0.8-1.2 of it), the band is the whole window's widened by exactly that
    variance, and decisions hold (a decorrelation found, a clean window not). At or below the
    size every row is scored, as before."""
    monkeypatch.setattr(sorts, "SAMPLE_ABOVE", 20_000)
    monkeypatch.setattr(sorts, "SAMPLE_SIZE", 20_000)
    model = fit_pca_drift(frame(5000, seed=1, correlation=0.9), TYPES)
    assert model is not None
    window = frame(40_000, seed=12, correlation=0.9)
    whole = float(model.errors(window).mean())
    differences, stated = [], []
    for seed in range(150):
        monkeypatch.setattr(sorts, "SAMPLE_SEED", seed)
        result = multivariate_drift(model, window)
        sample = result["sample"]
        assert sample["rows"] == 20_000 and sample["of"] == 40_000
        differences.append(result["score"] - whole)
        stated.append(sample["error"])
        plain = model.band(40_000)
        widened = model.band(40_000, sample["error"] ** 2)
        assert result["band"] == list(widened) and widened[1] > plain[1]
    assert 0.8 <= np.std(differences) / np.mean(stated) <= 1.2
    assert abs(np.mean(differences)) < 3 * np.mean(stated) / np.sqrt(150)  # unbiased
    assert multivariate_drift(model, frame(40_000, seed=3, correlation=0.6))["drifted"] is True
    assert multivariate_drift(model, frame(40_000, seed=4, correlation=0.9))["drifted"] is False
    small = frame(20_000, seed=5, correlation=0.9)
    exact = multivariate_drift(model, small)
    assert "sample" not in exact and exact["score"] == float(model.errors(small).mean())
    assert exact["band"] == list(model.band(20_000))
