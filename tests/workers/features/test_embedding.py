"""The embedding type on its own: cleaning, its summary, evidently parity of the default test,
and the calibrated method's false-alarm rate and power."""

import json
from typing import Any

import numpy as np
import pandas as pd
import pytest
from evidently.legacy.metrics.data_drift.embedding_drift_methods import ModelDriftMethod

from workers.drift import data_drift, summarize_reference
from workers.drift.summary import ReferenceSummary
from workers.features import InvalidValue, feature_type
from workers.features.embedding import (
    EMBEDDING_METHODS,
    MAX_DIM,
    N_PERMUTATIONS,
    Embedding,
    classifier_mw_score,
    mean_perm_score,
    min_p,
    model_score,
    parsed_lists,
)

DIM = 16


def _vectors(rng: np.random.Generator, n: int, shift: float = 0.0) -> np.ndarray:
    return (rng.normal(size=(n, DIM)) + shift).astype("float32")


def _column(vectors: np.ndarray) -> pd.Series:
    return feature_type("embedding").column(pd.Series(list(vectors)))


def _evidently(reference: np.ndarray, current: np.ndarray) -> tuple[float, bool]:
    """evidently's default embedding test, as EmbeddingsDriftMetric picks it, on fresh copies
    (it adds a target column to the frames it gets and reseeds numpy in bootstrap mode)."""
    method = ModelDriftMethod(bootstrap=len(reference) < 1000)
    score, drifted, name = method(
        pd.DataFrame(current.astype("float64")), pd.DataFrame(reference.astype("float64"))
    )
    assert name == "model"
    return float(score), bool(drifted)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ([1.0, 2.0], "expected 3 numbers, got 2"),
        ([1.0, "2", 3.0], "element 1 is str, not a number"),
        ([1.0, True, 3.0], "element 1 is bool, not a number"),
        ([1.0, float("nan"), 3.0], "element 1 is not finite (NaN and infinity are rejected)"),
        ([float("inf"), 1.0, 3.0], "element 0 is not finite (NaN and infinity are rejected)"),
        ({"a": 1}, "embedding feature got dict (send a list of numbers)"),
        (1.5, "embedding feature got float (send a list of numbers)"),
    ],
)
def test_a_malformed_vector_is_refused_with_its_reason(value: Any, message: str) -> None:
    with pytest.raises(InvalidValue) as raised:
        Embedding(3).clean(value)
    assert raised.value.message == message


def test_a_vector_is_cleaned_to_float32_values() -> None:
    assert Embedding(2).clean([1, 0.1]) == [1.0, float(np.float32(0.1))]


@pytest.mark.parametrize("dim", [0, MAX_DIM + 1, 2.5, "8", True, None])
def test_a_dim_outside_the_documented_range_is_refused(dim: Any) -> None:
    assert Embedding().option_errors({"dim": dim}) == {"dim": f"required: an integer from 1 to {MAX_DIM}"}


def test_the_summary_round_trips_through_its_stored_form() -> None:
    rng = np.random.default_rng(0)
    reference = pd.DataFrame({"e": _column(_vectors(rng, 50))})
    summary = summarize_reference(reference, {"e": "embedding"})
    restored = ReferenceSummary.from_bytes(summary.to_bytes()).column("e")
    assert restored.n == 50 and restored.vectors.dtype == np.float32 and restored.vectors.shape == (50, DIM)
    assert np.array_equal(restored.vectors, summary.column("e").vectors)
    assert restored.components.shape == (2, DIM)


@pytest.mark.parametrize(
    ("n_reference", "n_current", "shift"), [(300, 200, 0.0), (300, 200, 0.3), (1200, 600, 0.1)]
)
def test_the_default_method_equals_evidentlys_score_and_decision(
    n_reference: int, n_current: int, shift: float
) -> None:
    rng = np.random.default_rng(n_reference + int(shift * 10))
    reference, current = _vectors(rng, n_reference), _vectors(rng, n_current, shift)
    expected_score, expected_drift = _evidently(reference, current)
    result = data_drift(
        pd.DataFrame({"e": _column(reference)}), pd.DataFrame({"e": _column(current)}), {"e": "embedding"}
    ).columns["e"]
    assert (result.method, result.higher_is_drift) == ("model", True)
    assert result.score == pytest.approx(expected_score, abs=1e-12)
    assert result.drifted is expected_drift
    score, threshold = model_score(reference, current, n_reference)
    assert result.threshold == threshold and (threshold == 0.55) is (n_reference >= 1000)


def test_the_default_method_leaves_numpys_global_seed_alone() -> None:
    rng = np.random.default_rng(5)
    np.random.seed(123)
    expected = np.random.RandomState(123).rand()
    model_score(_vectors(rng, 100), _vectors(rng, 100), 100)  # bootstrap mode
    assert np.random.rand() == expected


def test_the_calibrated_method_is_picked_per_type_and_stored_as_a_p_value() -> None:
    rng = np.random.default_rng(7)
    reference = pd.DataFrame({"e": _column(_vectors(rng, 300)), "x": rng.normal(size=300)})
    current = pd.DataFrame({"e": _column(_vectors(rng, 300, 0.3)), "x": rng.normal(size=300)})
    types = {"e": "embedding", "x": "numerical"}
    result = data_drift(reference, current, types, methods={"embedding": "classifier_mw"}).columns
    assert (result["e"].method, result["e"].threshold, result["e"].higher_is_drift) == (
        "classifier_mw",
        0.05,
        False,
    )
    assert result["e"].drifted and result["e"].score is not None and result["e"].score < 1e-6
    assert result["x"].method == "ks"  # other types keep their default


def test_the_calibrated_method_keeps_its_false_alarm_rate_at_small_and_larger_n() -> None:
    """120 no-drift runs per size: a 5% test alarms at most 12 times with probability > 0.99."""
    rng = np.random.default_rng(11)
    for n in (60, 400):
        alarms = sum(
            classifier_mw_score(_vectors(rng, n), _vectors(rng, n), n)[0] <= 0.05 for _ in range(120)
        )
        assert alarms <= 12, (n, alarms)


def test_the_calibrated_method_detects_a_clear_shift_nearly_always() -> None:
    rng = np.random.default_rng(13)
    detected = sum(
        classifier_mw_score(_vectors(rng, 300), _vectors(rng, 300, 0.25), 300)[0] <= 0.05 for _ in range(20)
    )
    assert detected >= 19


def test_every_method_declares_a_stattest_of_its_own_name() -> None:
    assert feature_type("embedding").methods() == ("model", "classifier_mw", "mean_perm")
    assert all(m.test.name == name for name, m in EMBEDDING_METHODS.items())


def test_the_permutation_method_is_picked_per_type_and_detects_a_clear_shift() -> None:
    rng = np.random.default_rng(17)
    reference = pd.DataFrame({"e": _column(_vectors(rng, 300))})
    current = pd.DataFrame({"e": _column(_vectors(rng, 300, 0.3))})
    result = data_drift(reference, current, {"e": "embedding"}, methods={"embedding": "mean_perm"}).columns[
        "e"
    ]
    assert (result.method, result.threshold, result.higher_is_drift) == ("mean_perm", 0.05, False)
    # no relabelling reaches the observed mean statistics; only the one that tops the second-
    # moment statistic ranks as extreme in the min-p combination
    assert result.drifted and result.score <= 2 / (1 + N_PERMUTATIONS)


def test_the_permutation_method_detects_a_new_cluster_that_barely_moves_the_mean() -> None:
    """A few window rows moved far along a main axis, and as many the other way: the mean stays,
    the main axis's second moment does not (the mean statistics alone find it about as often as
    a 5% test alarms)."""
    rng = np.random.default_rng(31)
    scale = np.where(np.arange(DIM) == 0, 3.0, 1.0)  # one main axis
    detected = 0
    for _ in range(20):
        reference, current = _vectors(rng, 300) * scale, _vectors(rng, 300) * scale
        current[:30, 0], current[30:60, 0] = 8.0, -8.0  # 20% of rows in two new clusters
        detected += mean_perm_score(reference, current, 300)[0] <= 0.05
    assert detected >= 18


@pytest.mark.parametrize("n", [6, 60, 400])  # 6 per side: fewer rows than dimensions (the Gram path)
def test_the_permutation_method_keeps_its_false_alarm_rate(n: int) -> None:
    """120 no-drift runs: a 5% test alarms at most 12 times with probability > 0.99."""
    rng = np.random.default_rng(19 + n)
    scores = [mean_perm_score(_vectors(rng, n), _vectors(rng, n), n)[0] for _ in range(120)]
    assert sum(p <= 0.05 for p in scores) <= 12, n
    assert np.median(scores) > 0.3  # p-values spread over (0, 1], not piled near 0


def _low_rank(rng: np.random.Generator, n: int, shift: float = 0.0) -> np.ndarray:
    """64 dims: 4 strong latent factors plus unit noise, shifted along a fixed random direction
    (mostly off the main axes, as a mean shift in a random subspace of an embedding is)."""
    layout = np.random.default_rng(5)
    loadings = layout.normal(size=(4, 64)) * 3.0
    direction = layout.normal(size=64)
    direction /= np.linalg.norm(direction)
    return (rng.normal(size=(n, 4)) @ loadings + rng.normal(size=(n, 64)) + shift * direction).astype(
        "float32"
    )


def test_the_permutation_method_finds_a_small_shift_off_the_main_axes() -> None:
    """10 seeded runs of a 0.7-noise-SD shift at n = 200: found in all 10 (four ridges with equal
    min-p shares, before, found 7; evidently's default 2), and 0 alarms on 10 no-drift runs."""
    rng = np.random.default_rng(43)
    found = [
        mean_perm_score(_low_rank(rng, 200), _low_rank(rng, 200, 0.7), 200)[0] <= 0.05 for _ in range(10)
    ]
    quiet = [mean_perm_score(_low_rank(rng, 200), _low_rank(rng, 200), 200)[0] <= 0.05 for _ in range(10)]
    assert sum(found) >= 9 and sum(quiet) <= 1, (found, quiet)


def test_weighted_min_p_ranks_each_p_value_by_its_share() -> None:
    statistics = np.array([[9.0, 1.0, 2.0, 3.0], [0.0, 5.0, 1.0, 2.0]])
    # most of alpha to the first test, where the observed column is the largest: only it is as extreme
    assert min_p(statistics, (0.8, 0.2)) == 1 / 4
    # most of alpha to the second test, where the observed column is the smallest: every column is
    assert min_p(statistics, (0.2, 0.8)) == 1.0


def test_the_permutation_method_is_seeded_and_on_the_permutation_grid() -> None:
    rng = np.random.default_rng(23)
    reference, current = _vectors(rng, 80), _vectors(rng, 90, 0.05)
    p = mean_perm_score(reference, current, 80)[0]
    assert p == mean_perm_score(reference.copy(), current.copy(), 80)[0]
    assert (p * (1 + N_PERMUTATIONS)) == pytest.approx(round(p * (1 + N_PERMUTATIONS)))


def test_min_p_of_one_statistic_is_its_permutation_p_value() -> None:
    statistics = np.array([[3.0, 1.0, 5.0, 3.0, 0.5]])
    assert min_p(statistics) == 3 / 5  # itself, the tie and the 5.0 are at least as large
    # two tests: the observed column is the smallest p of either; ranked among the columns' smallest
    assert min_p(np.array([[9.0, 1.0, 2.0, 3.0], [0.0, 5.0, 1.0, 2.0]])) == 2 / 4


def test_a_windows_json_texts_parse_like_the_stored_lists() -> None:
    rng = np.random.default_rng(29)
    vectors = _vectors(rng, 5)
    texts = pd.Series([json.dumps([float(v) for v in row]) for row in vectors], index=range(10, 15))
    parsed = Embedding(DIM).column(texts)
    assert list(parsed.index) == list(range(10, 15))
    assert np.array_equal(np.vstack(parsed.to_list()), vectors)
    one_bad = Embedding(DIM).column(pd.Series([texts.iloc[0], '[1.0, "x"]']))
    assert np.array_equal(one_bad.iloc[0], vectors[0]) and one_bad.iloc[1] is None


@pytest.mark.parametrize(
    "texts",
    [
        ["[1, 2]", "[1, 2, 3]"],  # rows of two lengths
        ["[1, NaN]"],
        ["[1, Infinity]"],
        ["[1e400, 1]"],  # overflows float32
        ['[1, "a"]'],
        ["[1, ]"],
        ["[[1], [2]]"],
        ["[1,\n2]"],
        ["[true, 1]"],
        ["[null, 1]"],
        ["[0x10, 1]"],
    ],
)
def test_the_one_call_parse_hands_anything_unusual_to_the_row_by_row_path(texts: list[str]) -> None:
    assert parsed_lists(texts) is None


def test_the_one_call_parse_returns_each_row_as_float32() -> None:
    rng = np.random.default_rng(31)
    vectors = rng.normal(size=(300, 7)).astype("float32")
    texts = [json.dumps([float(v) for v in row]) for row in vectors]
    texts[5] = "[ " + texts[5][1:-1].replace(",", " ,") + " ]"  # spaces anywhere between the numbers
    parsed = parsed_lists(texts)
    assert parsed is not None and len(parsed) == 300
    assert all(row.dtype == np.float32 and row.shape == (7,) for row in parsed)
    assert np.array_equal(np.vstack(parsed), vectors)
