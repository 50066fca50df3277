"""quality.py against scikit-learn, and its intervals."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from sklearn import metrics as sk

from tests.clock import T0, at, iso
from workers.drift.quality import (
    average_ranks,
    classification_metrics,
    label_stats,
    regression_metrics,
    wilson_interval,
)

CLASSES = ["cat", "dog", "eel"]


def _multiclass(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y_true = rng.choice(CLASSES, n, p=[0.5, 0.3, 0.2])
    logits = rng.normal(size=(n, 3)) + 1.5 * (y_true[:, None] == np.array(CLASSES))
    probabilities = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    return y_true, np.array(CLASSES)[probabilities.argmax(axis=1)], probabilities


def test_multiclass_metrics_equal_sklearn() -> None:
    y_true, y_pred, probabilities = _multiclass(3000)
    result = classification_metrics(y_true, y_pred, classes=CLASSES, probabilities=probabilities)
    assert result["accuracy"] == pytest.approx(sk.accuracy_score(y_true, y_pred))
    for average in ("precision", "recall", "f1"):
        scorer = getattr(sk, f"{average}_score")
        assert result[f"{average}_macro"] == pytest.approx(
            scorer(y_true, y_pred, labels=CLASSES, average="macro")
        )
        per_class = scorer(y_true, y_pred, labels=CLASSES, average=None)
        assert [result["per_class"][c][average] for c in CLASSES] == pytest.approx(per_class)
    assert result["roc_auc"] == pytest.approx(
        sk.roc_auc_score(y_true, probabilities, multi_class="ovr", labels=CLASSES)
    )
    assert result["log_loss"] == pytest.approx(sk.log_loss(y_true, probabilities, labels=CLASSES))


def test_binary_auc_uses_second_class_probability_and_counts_ties_half() -> None:
    rng = np.random.default_rng(1)
    y_true = rng.choice([0, 1], 2000)
    p1 = np.round(np.clip(0.5 + 0.3 * (y_true - 0.5) + rng.normal(0, 0.25, 2000), 0, 1), 1)  # many ties
    probabilities = np.column_stack([1 - p1, p1])
    result = classification_metrics(
        y_true, (p1 >= 0.5).astype(int), classes=[0, 1], probabilities=probabilities
    )
    assert result["roc_auc"] == pytest.approx(sk.roc_auc_score(y_true, p1))


def test_class_absent_from_window_scores_zero_like_sklearn_and_auc_is_none() -> None:
    y_true = np.array(["cat", "dog", "cat", "dog"])
    y_pred = np.array(["cat", "cat", "cat", "eel"])
    probabilities = np.full((4, 3), 1 / 3)
    result = classification_metrics(y_true, y_pred, classes=CLASSES, probabilities=probabilities)
    assert result["per_class"]["eel"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 0}
    assert result["f1_macro"] == pytest.approx(
        sk.f1_score(y_true, y_pred, labels=CLASSES, average="macro", zero_division=0)
    )
    assert result["roc_auc"] is None


def test_wilson_interval_matches_closed_form_and_stays_in_unit_interval() -> None:
    # Wilson bounds solved as the roots of a quadratic: (2np + z² ± z√(z² + 4np(1-p))) / 2(n + z²)
    n, successes, z = 100, 81, 1.959963984540054
    p = successes / n
    root = z * np.sqrt(z**2 + 4 * n * p * (1 - p))
    expected = (
        (2 * n * p + z**2 - root) / (2 * (n + z**2)),
        (2 * n * p + z**2 + root) / (2 * (n + z**2)),
    )
    assert wilson_interval(successes, n) == pytest.approx(expected)
    assert wilson_interval(0, 10)[0] == pytest.approx(0.0, abs=1e-12) and wilson_interval(10, 10)[
        1
    ] == pytest.approx(1.0)


def test_bootstrap_interval_is_reproducible_and_brackets_the_estimate() -> None:
    y_true, y_pred, _ = _multiclass(2000, seed=3)
    first = classification_metrics(y_true, y_pred, classes=CLASSES)
    again = classification_metrics(y_true, y_pred, classes=CLASSES)
    assert first["f1_macro_ci"] == again["f1_macro_ci"]
    assert first["f1_macro_ci"][0] < first["f1_macro"] < first["f1_macro_ci"][1]
    assert first["f1_macro_ci"][1] - first["f1_macro_ci"][0] < 0.1


def test_labels_outside_classes_are_rejected() -> None:
    with pytest.raises(ValueError, match="outside classes"):
        classification_metrics(["cat", "owl"], ["cat", "cat"], classes=CLASSES)


def test_regression_metrics_equal_sklearn_with_intervals() -> None:
    rng = np.random.default_rng(4)
    y_true = rng.normal(10, 3, 5000)
    y_pred = y_true + rng.normal(0.2, 1.0, 5000)
    result = regression_metrics(y_true, y_pred)
    assert result["mae"] == pytest.approx(sk.mean_absolute_error(y_true, y_pred))
    assert result["rmse"] == pytest.approx(np.sqrt(sk.mean_squared_error(y_true, y_pred)))
    assert result["r2"] == pytest.approx(sk.r2_score(y_true, y_pred))
    for name in ("mae", "rmse", "r2"):
        low, high = result[f"{name}_ci"]
        assert low < result[name] < high


def test_outputs_are_strict_json_even_when_undefined() -> None:
    constant = regression_metrics(np.ones(50), np.linspace(0, 2, 50))
    assert constant["r2"] is None and constant["r2_ci"] == [None, None]
    y_true, y_pred, probabilities = _multiclass(300)
    for payload in (
        constant,
        classification_metrics(y_true, y_pred, classes=CLASSES, probabilities=probabilities),
    ):
        json.dumps(payload, allow_nan=False)


def test_label_coverage_and_delay() -> None:
    predicted = pd.to_datetime([iso(T0)] * 4)
    labelled = pd.to_datetime([iso(at(minutes=1)), iso(at(hours=1)), None, iso(at(minutes=10))], utc=True)
    result = label_stats(predicted, labelled)
    assert result["label_coverage"] == 0.75 and result["n_labelled"] == 3
    assert result["label_delay_median_s"] == 600.0 and result["label_delay_max_s"] == 3600.0
    nothing = label_stats(predicted, [None] * 4)
    assert nothing["label_coverage"] == 0.0 and nothing["label_delay_median_s"] is None
    json.dumps(nothing, allow_nan=False)


@pytest.mark.parametrize("values", [[0.5], [2.0, 2.0, 2.0], [0.0, -0.0, 1.0, 0.0], "rounded", "continuous"])
def test_average_ranks_are_scipys_rankdata_value_for_value(values: object) -> None:
    from scipy.stats import rankdata

    rng = np.random.default_rng(3)
    if values == "rounded":  # many ties of every size
        values = rng.random(5000).round(2)
    elif values == "continuous":
        values = rng.normal(size=5000)
    array = np.asarray(values, dtype="float64")
    assert np.array_equal(average_ranks(array), rankdata(array))


@pytest.mark.parametrize("classes", [[0, 1, 2], [2, 0, 1], [0, 1, 2.0], [True, False]])
def test_integer_labels_score_the_same_as_the_same_labels_as_objects(classes: list[object]) -> None:
    """Labels held as int64 (the columnar source's) are coded as numbers without an object per
    row; the metrics equal those of the same labels as Python objects, and a value outside the
    classes is refused the same way."""
    rng = np.random.default_rng(5)
    y_true, y_pred = rng.integers(0, 2, 3000), rng.integers(0, 2, 3000)
    as_objects = classification_metrics(y_true.astype(object), y_pred.astype(object), classes=classes)
    assert classification_metrics(y_true, y_pred, classes=classes) == as_objects
    with pytest.raises(ValueError, match="outside classes"):
        classification_metrics(np.r_[y_true, 7], np.r_[y_pred, 0], classes=classes)


def _auc_by_ranks(scores: np.ndarray, positive: np.ndarray) -> float:
    n_pos = int(positive.sum())
    n_neg = positive.size - n_pos
    ranks = average_ranks(scores)
    return float((ranks[positive].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


@pytest.mark.parametrize("scores", ["continuous", "rounded", "two values", "one value", "with NaN"])
def test_the_auc_from_the_two_sides_sorted_apart_is_the_ranks_auc_to_the_bit(scores: str) -> None:
    """U read off the positives' and negatives' sorted scores (ties half) equals the rank-sum
    form bit for bit, and scikit-learn's to rounding; a score that is NaN takes the ranks' path."""
    from workers.drift.quality import roc_auc

    rng = np.random.default_rng(8)
    n = 20_001
    positive = rng.random(n) < 0.37
    values = {
        "continuous": rng.normal(size=n) + positive,
        "rounded": np.round(rng.random(n) * 0.6 + 0.4 * positive, 2),
        "two values": (rng.random(n) < 0.3 + 0.4 * positive).astype("float64"),
        "one value": np.full(n, 0.5),
        "with NaN": np.where(rng.random(n) < 0.01, np.nan, rng.normal(size=n) + positive),
    }[scores]
    got = roc_auc(positive.astype(np.int64), np.column_stack([1 - values, values]))
    assert got == _auc_by_ranks(values, positive)
    if scores != "with NaN":
        assert got == pytest.approx(sk.roc_auc_score(positive, values), rel=1e-12)


@pytest.mark.parametrize(
    "classes", [[0, 1], [1, 0], [3, 1, 3, -2], [-(2**63), -(2**63) + 3], [2**63 - 1, 2**63 - 5], [2**40, 0]]
)
def test_integer_classes_are_coded_from_a_table_as_by_a_search_of_the_classes(
    classes: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Classes of a short span are coded from a table over it: each value's code is the one the
    binary search of the classes gives (a repeated class's first place, -1 outside the classes),
    at int64's two ends as well."""
    from workers.drift import quality

    rng = np.random.default_rng(12)
    ends = [2**63 - 1, -(2**63), 2**62, -(2**62), 2**63 - 3, -(2**63) + 1]
    values = np.r_[rng.integers(-4, 5, 3000), classes, ends].astype(np.int64)
    ordered = np.asarray(classes, dtype=np.int64)
    by_table = quality._integer_codes(values, ordered)
    small = np.array([0, 1, 2, -1, 7], dtype=np.int32)  # narrower ints, classes past their range
    assert quality._integer_codes(small, np.array([1, 0])).tolist() == [1, 0, -1, -1, -1]
    assert quality._integer_codes(small, np.array([2**40, 2**40 + 1])).tolist() == [-1] * 5
    assert quality._integer_codes(small, np.array([3_000_000_001, 3_000_000_000])).tolist() == [-1] * 5
    monkeypatch.setattr(quality, "TABLE_SPAN", 0)  # every span searched
    assert np.array_equal(by_table, quality._integer_codes(values, ordered))
    assert quality._integer_codes(np.array([0, 1, 2, -1]), np.array([1, 0])).tolist() == [1, 0, -1, -1]
    assert sorted(set(by_table.tolist())) == sorted({-1, *(classes.index(c) for c in classes)})


def test_float_labels_of_integer_classes_are_coded_as_numbers_like_the_objects() -> None:
    """Labels come as float64 where some are missing: whole numbers match the int classes as
    the objects would (1.0 is 1); a fraction or NaN is refused naming it, as before."""
    rng = np.random.default_rng(9)
    y_true, y_pred = rng.integers(0, 3, 4000), rng.integers(0, 3, 4000)
    as_objects = classification_metrics(y_true.astype(object), y_pred, classes=[2, 0, 1])
    assert classification_metrics(y_true.astype("float64"), y_pred, classes=[2, 0, 1]) == as_objects
    for bad in (1.5, np.nan, 2.0**70):
        with pytest.raises(ValueError, match="outside classes"):
            classification_metrics(np.r_[y_true.astype("float64"), bad], np.r_[y_pred, 0], classes=[0, 1, 2])


def test_label_stats_of_aware_times_equal_those_of_the_same_times_as_objects() -> None:
    rng = np.random.default_rng(10)
    predicted = pd.Series(
        pd.DatetimeIndex([T0] * 500, tz="UTC") + pd.to_timedelta(rng.integers(0, 10**6, 500), "s")
    )
    delays = pd.to_timedelta(rng.integers(-100, 10**5, 500), "ms")
    labelled = (predicted + delays).where(rng.random(500) < 0.6)
    as_objects = label_stats(  # Python datetimes and None: parsed by to_datetime, as before
        list(predicted.dt.to_pydatetime()), [None if pd.isna(t) else t.to_pydatetime() for t in labelled]
    )
    assert label_stats(predicted, labelled) == as_objects
    assert (
        label_stats(predicted, labelled)["label_delay_max_s"]
        == delays[labelled.notna()].max().total_seconds()
    )
