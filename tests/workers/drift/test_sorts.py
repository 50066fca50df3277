"""One sort per window column per check: the shared sort and the histogram from sorted values."""

import os
import threading

import numpy as np
import pandas as pd
import pytest

from workers.drift import sorts, stats
from workers.drift.distribution import edges_for, histogram, sorted_histogram
from workers.drift.sorts import PARALLEL_MIN_ROWS, each_column, shared_sorts, sorted_finite
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


def test_columns_worked_on_in_parallel_come_back_in_order_and_share_the_checks_sorts() -> None:
    """Above PARALLEL_MIN_ROWS each column runs on a pool thread, in a copy of the caller's
    context: the results are the serial ones, in the columns' order, and a sort made on a
    thread is the one the check's later callers get."""
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({name: rng.normal(size=PARALLEL_MIN_ROWS) for name in "abcde"})
    frame.loc[::9, "b"] = np.nan
    threads: set[int] = set()

    def sorted_on_a_thread(name: str) -> np.ndarray:
        threads.add(threading.get_ident())
        return sorted_finite(frame[name])

    with shared_sorts():
        got = each_column(sorted_on_a_thread, list("abcde"), len(frame))
        for name, values in zip("abcde", got, strict=True):
            assert sorted_finite(frame[name]) is values  # the thread's sort, kept for the check
            assert np.array_equal(values, np.sort(frame[name].dropna().to_numpy()))
    # pool threads did the work (with one CPU there is no pool: the caller did)
    assert (threading.get_ident() in threads) == (len(os.sched_getaffinity(0)) < 2)
    threads.clear()
    small = each_column(sorted_on_a_thread, list("ab"), 10)
    assert [len(v) for v in small] == [len(frame), frame["b"].notna().sum()]
    assert threads == {threading.get_ident()}  # a small window: one after another, here


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


@pytest.mark.parametrize("block", [stats.W1_BLOCK, 7])
def test_the_quantile_form_wasserstein_equals_scipys_on_ties_either_size_and_block_edges(
    block: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """W1 from the two sorted samples' quantile steps (no merge) is scipy's CDF integral, to
    rounding: samples of 1 value, equal sizes, either one larger, rounded so values tie, and
    blocks that cut the smaller sample anywhere."""
    from scipy.stats import wasserstein_distance

    monkeypatch.setattr(stats, "W1_BLOCK", block)
    rng = np.random.default_rng(7)
    for _ in range(400):
        n, m = (int(v) for v in rng.integers(1, 120, size=2))
        if rng.random() < 0.2:
            m = n
        a = np.sort(np.round(rng.normal(size=n), int(rng.integers(0, 3))))
        b = np.sort(np.round(rng.normal(rng.normal(), 2.0, size=m), int(rng.integers(0, 3))))
        want = wasserstein_distance(a, b)
        assert stats.wasserstein_sorted(a, b) == pytest.approx(want, rel=1e-12, abs=1e-15)
        assert stats.wasserstein_sorted(b, a) == pytest.approx(want, rel=1e-12, abs=1e-15)
    for n, m in [(1, 50_000), (999, 100_000), (99_999, 100_000), (70_000, 70_000), (4096, 65_536)]:
        a = np.sort(np.round(rng.standard_t(3, size=n), 2))
        b = np.sort(rng.standard_t(3, size=m) + 0.05)
        assert stats.wasserstein_sorted(a, b) == pytest.approx(wasserstein_distance(a, b), rel=1e-11)


def test_a_categorical_column_is_counted_once_per_check_for_drift_and_drill_down(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from workers.features import categorical

    kind = feature_type("categorical")
    summary = kind.summarize(pd.Series(["a", "b", "b", None, "c"] * 50, dtype=object))
    window = pd.Series(["a", "c", "c", "d", None] * 80, dtype=object)
    alone = kind.drift(summary, window), kind.distribution(summary, window)
    counted: list[int] = []
    real = categorical.category_counts

    def counting(values: pd.Series) -> dict[object, int]:
        counted.append(len(values))
        return real(values)

    monkeypatch.setattr(categorical, "category_counts", counting)
    with shared_sorts():
        shared = kind.drift(summary, window), kind.distribution(summary, window)
    assert counted == [len(window)]  # once, for both
    assert shared == alone


def test_a_numerical_columns_sorted_copy_is_released_once_its_drill_down_is_made() -> None:
    """In a check, the drift test makes the column's drill-down on its thread and drops the
    sorted copy (at 10M rows × 20 columns they were 1.6 GB kept to the check's end); the
    drill-down asked for later is that one, equal to an unshared run's."""
    rng = np.random.default_rng(5)
    kind = feature_type("numerical")
    summary = summarize_numerical(pd.Series(rng.normal(size=3000)))
    window = pd.Series(rng.normal(0.3, 1.0, size=20_000))
    alone = kind.distribution(summary, window)
    with shared_sorts():
        kind.drift(summary, window)
        kept = sorts._SHARED.get()
        assert kept is not None and sorts._sorted_key(window) not in kept
        shared = kind.distribution(summary, window)
        assert kind.distribution(summary, window) is shared  # made once
        assert sorts._sorted_key(window) not in kept  # not sorted again for it
    assert shared == alone


def _sampling_above(monkeypatch: pytest.MonkeyPatch, above: int, size: int) -> None:
    monkeypatch.setattr(sorts, "SAMPLE_ABOVE", above)
    monkeypatch.setattr(sorts, "SAMPLE_SIZE", size)


def test_a_very_large_windows_distance_and_drill_down_come_from_one_stated_sample(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Past SAMPLE_ABOVE finite values the Wasserstein test and the drill-down read a uniform
    sample of SAMPLE_SIZE of them: the score says so (size, the window's count, stated error;
    the check's note too), the drill-down's bars and distance are the same sample's, and the
    window checked again gets the same score. At or below it nothing is sampled."""
    from workers.drift.engine import data_drift

    _sampling_above(monkeypatch, 20_000, 5_000)
    rng = np.random.default_rng(11)
    kind = feature_type("numerical")
    summary = summarize_numerical(pd.Series(rng.normal(size=3000)))
    window = pd.Series(rng.normal(0.1, 1.0, size=30_000))
    window[::10] = np.nan  # 27,000 finite values
    with shared_sorts():
        scored = kind.drift(summary, window)
        drawn = kind.distribution(summary, window)
    assert scored is not None and scored.sample is not None and drawn is not None
    assert scored.n_current == 27_000 and scored.sample["rows"] == 5_000 and scored.sample["of"] == 27_000
    assert 0 < scored.sample["error"] < 0.05
    assert drawn["sample"] == scored.sample and drawn["n_current"] == 27_000
    assert drawn["wasserstein_norm"] == scored.score
    assert sum(round(f * 5_000) for f in drawn["current"]) == 5_000  # the bars count the sample
    again = kind.drift(summary, window)  # outside a check, a fresh sort of a fresh draw
    assert again is not None and again.score == scored.score and again.sample == scored.sample
    exact = stats.wasserstein_norm(summary.sorted_values, summary.std, window.dropna().to_numpy())
    assert scored.score != exact and abs(scored.score - exact) < 5 * scored.sample["error"]

    stored = data_drift(
        summary_frame := pd.DataFrame({"x": rng.normal(size=3000)}), {"x": window}, {"x": "numerical"}
    )
    column = stored.to_dict()["columns"]["x"]
    assert column["sample"] is not None and column["sample"]["rows"] == 5_000
    assert column["note"] is not None and "5,000 of the window's 27,000 values" in column["note"]
    assert len(summary_frame) == 3000

    small = window.iloc[:22_000]  # 19,800 finite values: not past SAMPLE_ABOVE
    unsampled = kind.drift(summary, small)
    assert unsampled is not None and unsampled.sample is None and unsampled.n_current == 19_800
    assert unsampled.score == stats.wasserstein_norm(
        summary.sorted_values, summary.std, small.dropna().to_numpy()
    )
    plain = data_drift(summary_frame, {"x": small}, {"x": "numerical"}).to_dict()["columns"]["x"]
    assert plain["sample"] is None and plain["note"] is None


@pytest.mark.parametrize("shape", ["normal", "heavy tails", "two modes", "ties"])
def test_the_stated_error_of_a_sampled_distance_bounds_its_mean_error_and_is_not_loose(
    shape: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over 150 draws of 20,000 of a column's 60,000 values, against a reference like it and one
    drifted from it: the mean absolute difference between the sample's score and the column's
    stays within the mean stated error, and the stated error is close to the sample's own
    distance from the column (the bound it is derived from; about sqrt(2/pi) of it when the
    shares are near normal), so it is neither loose nor missing the finite population's factor."""
    _sampling_above(monkeypatch, 50_000, 20_000)
    rng = np.random.default_rng(["normal", "heavy tails", "two modes", "ties"].index(shape))
    n = 60_000
    column = {
        "normal": lambda: rng.normal(size=n),
        "heavy tails": lambda: rng.standard_t(3, size=n),
        "two modes": lambda: np.where(rng.random(n) < 0.3, rng.normal(-4, 0.5, n), rng.normal(2, 1, n)),
        "ties": lambda: np.round(rng.gamma(2.0, 2.0, size=n), 0),
    }[shape]()
    window = pd.Series(column)
    kind = feature_type("numerical")
    for shift in (0.0, 0.8):
        summary = summarize_numerical(pd.Series(rng.choice(column, 5_000) + shift * column.std()))
        exact = stats.wasserstein_norm(summary.sorted_values, summary.std, column)
        errors, stated, own = [], [], []
        for seed in range(150):
            monkeypatch.setattr(sorts, "SAMPLE_SEED", seed)
            scored = kind.drift(summary, window)
            assert scored is not None and scored.sample is not None and scored.n_current == n
            errors.append(abs(scored.score - exact))
            stated.append(scored.sample["error"])
            sample = np.sort(column[sorts.sample_positions(n)])
            own.append(stats.wasserstein_sorted(sample, np.sort(column)) / max(summary.std, 0.001))
        assert np.mean(errors) <= np.mean(stated)
        assert 0.72 * np.mean(stated) <= np.mean(own) <= 0.9 * np.mean(stated)
        assert np.std(stated) < 0.2 * np.mean(stated)  # read off each sample, it varies little


def test_sample_positions_are_distinct_in_order_and_the_same_for_one_size() -> None:
    positions = sorts.sample_positions(sorts.SAMPLE_SIZE * 3)
    assert positions.size == sorts.SAMPLE_SIZE == np.unique(positions).size
    assert np.all(np.diff(positions) > 0) and positions[0] >= 0 and positions[-1] < sorts.SAMPLE_SIZE * 3
    assert np.array_equal(positions, sorts.sample_positions(sorts.SAMPLE_SIZE * 3))
    thirds = np.bincount(positions // sorts.SAMPLE_SIZE, minlength=3) / sorts.SAMPLE_SIZE
    assert np.allclose(thirds, 1 / 3, atol=0.005)  # spread over the whole column
