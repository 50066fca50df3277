"""One sort per window column per check: the shared sort and the histogram from sorted values."""

import numpy as np
import pandas as pd

from workers.drift.distribution import edges_for, histogram, sorted_histogram
from workers.drift.sorts import presort, shared_sorts, sorted_finite
from workers.drift.summary import summarize_numerical
from workers.features.registry import feature_type


def test_a_column_is_sorted_once_within_a_check_and_every_time_outside() -> None:
    frame = pd.DataFrame({"a": [3.0, np.nan, 1.0, np.inf, 2.0], "b": [9.0, 8.0, 7.0, 6.0, 5.0]})
    with shared_sorts():
        first = sorted_finite(frame["a"])
        assert sorted_finite(frame["a"]) is first  # the same column: the same sorted array
        assert sorted_finite(frame["b"]).tolist() == [5.0, 6.0, 7.0, 8.0, 9.0]  # another column
    assert first.tolist() == [1.0, 2.0, 3.0]  # missing and inf dropped, as evidently does
    assert sorted_finite(frame["a"]) is not sorted_finite(frame["a"])


def test_presorted_columns_are_the_ones_sorted_finite_hands_out_and_equal_numpys_sort() -> None:
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({name: rng.normal(size=5000) for name in "abc"})
    frame.loc[::9, "b"] = np.nan
    with shared_sorts():
        presort(frame[name] for name in "abc")
        for name in "abc":
            got = sorted_finite(frame[name])
            assert sorted_finite(frame[name]) is got  # sorted once, by presort
            assert np.array_equal(got, np.sort(frame[name].dropna().to_numpy()))
    presort([frame["a"], frame["b"]])  # outside a check: nothing to keep them in, no error


def test_the_histogram_of_sorted_values_counts_as_numpys_of_the_clipped_values() -> None:
    rng = np.random.default_rng(3)
    for _ in range(100):
        reference = np.sort(rng.normal(size=int(rng.integers(1, 2000))))
        current = np.sort(np.round(rng.normal(0.4, 1.3, size=int(rng.integers(1, 3000))), 1))
        edges = edges_for(reference, current)
        with_edges = np.sort(np.concatenate([current, edges, edges]))  # values on every edge
        for values in (reference, current, with_edges):
            assert sorted_histogram(values, edges).tolist() == histogram(values, edges).tolist()


def test_the_drill_down_reuses_the_drift_tests_distance_and_both_equal_an_unshared_run() -> None:
    rng = np.random.default_rng(4)
    kind = feature_type("numerical")
    summary = summarize_numerical(pd.Series(rng.normal(size=3000)))
    window = pd.Series(rng.normal(0.2, 1.0, size=20_000))
    alone = kind.drift(summary, window), kind.distribution(summary, window)
    with shared_sorts():
        shared = kind.drift(summary, window), kind.distribution(summary, window)
    assert alone[0] is not None and shared[0] is not None
    assert shared[0].score == alone[0].score
    assert shared[1] == alone[1]
    assert shared[1] is not None and shared[1]["wasserstein_norm"] == shared[0].score
