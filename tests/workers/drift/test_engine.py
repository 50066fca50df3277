"""Engine behaviour beyond evidently parity: summaries, prediction drift, edge cases."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from workers.drift import ReferenceSummary, data_drift, prediction_drift, summarize_reference
from workers.drift.stats import default_stattest
from workers.drift.summary import ColumnType


@pytest.mark.parametrize(
    ("column_type", "n_reference", "n_unique", "method"),
    [
        ("numerical", 1000, 6, "ks"),
        ("numerical", 1000, 5, "chisquare"),
        ("numerical", 1000, 3, "chisquare"),
        ("numerical", 1000, 2, "z"),
        ("categorical", 10, 40, "chisquare"),
        ("categorical", 1000, 2, "z"),
        ("numerical", 1001, 6, "wasserstein"),
        ("numerical", 1001, 5, "jensenshannon"),
        ("categorical", 1001, 2, "jensenshannon"),
        ("categorical", 50_000, 300, "jensenshannon"),
    ],
)
def test_default_method_selection(column_type: str, n_reference: int, n_unique: int, method: str) -> None:
    assert default_stattest(column_type, n_reference, n_unique).name == method


def test_summary_is_reused_without_the_reference_rows() -> None:
    rng = np.random.default_rng(0)
    reference = pd.DataFrame({"x": rng.normal(size=5000), "c": rng.choice(["a", "b", "c"], 5000)})
    columns: dict[str, ColumnType] = {"x": "numerical", "c": "categorical"}
    blob = summarize_reference(reference, columns).to_bytes()
    del reference
    current = pd.DataFrame({"x": rng.normal(1.0, size=800), "c": rng.choice(["a", "b"], 800)})
    result = data_drift(ReferenceSummary.from_bytes(blob), current, columns)
    assert result.columns["x"].drifted and result.columns["x"].method == "wasserstein"
    assert result.dataset_drift


def test_categories_keep_their_type_through_serialisation() -> None:
    reference = pd.DataFrame({"c": ["1", "1", 1, 2.5]})
    original = summarize_reference(reference, {"c": "categorical"})
    restored = ReferenceSummary.from_bytes(original.to_bytes())
    assert restored.summaries == original.summaries
    assert restored.column("c").counts == {"1": 2, 1: 1, 2.5: 1}


def test_prediction_drift_is_categorical_for_classification_numerical_for_regression() -> None:
    rng = np.random.default_rng(1)
    labels = pd.Series(rng.choice(["spam", "ham"], 3000))
    shifted = pd.Series(rng.choice(["spam", "ham"], 3000, p=[0.8, 0.2]))
    classification = prediction_drift(labels, shifted, task="classification")
    assert classification.method == "jensenshannon" and classification.drifted
    regression = prediction_drift(
        pd.Series(rng.normal(size=500)), pd.Series(rng.normal(size=500)), task="regression"
    )
    assert regression.method == "ks" and regression.column_type == "numerical"


def test_all_missing_current_column_is_reported_not_tested() -> None:
    reference = pd.DataFrame({"x": np.arange(100.0), "c": ["a"] * 100})
    current = pd.DataFrame({"x": [np.nan, np.inf], "c": [None, None]})
    result = data_drift(reference, current, {"x": "numerical", "c": "categorical"})
    assert all(c.method is None and not c.drifted and c.note for c in result.columns.values())
    assert result.share == 0.0 and not result.dataset_drift


def test_unknown_column_types_and_missing_columns_are_rejected() -> None:
    frame = pd.DataFrame({"x": [1.0]})
    with pytest.raises(ValueError, match="numerical"):
        data_drift(frame, frame, {"x": "audio"})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="missing"):
        data_drift(frame, frame, {"y": "numerical"})


def test_million_row_window_is_linear_work_on_a_summary() -> None:
    rng = np.random.default_rng(2)
    summary = summarize_reference(pd.DataFrame({"x": rng.normal(size=20_000)}), {"x": "numerical"})
    current = pd.DataFrame({"x": rng.normal(size=1_000_000)})
    assert not data_drift(summary, current, {"x": "numerical"}).columns["x"].drifted


def test_each_tested_column_says_whether_a_higher_score_is_drift() -> None:
    rng = np.random.default_rng(1)
    columns: dict[str, ColumnType] = {"small": "numerical", "large": "numerical", "empty": "numerical"}
    reference = pd.DataFrame(
        {"small": rng.normal(size=500), "large": rng.normal(size=500), "empty": rng.normal(size=500)}
    )
    current = pd.DataFrame({"small": rng.normal(size=300), "large": rng.normal(size=300), "empty": np.nan})
    big = pd.concat([reference] * 3, ignore_index=True)  # > 1000 rows: a distance, not a p-value
    p_value = data_drift(summarize_reference(reference, columns), current, columns).to_dict()["columns"]
    distance = data_drift(summarize_reference(big, columns), current, columns).to_dict()["columns"]
    assert (p_value["small"]["method"], p_value["small"]["higher_is_drift"]) == ("ks", False)
    assert (distance["large"]["method"], distance["large"]["higher_is_drift"]) == ("wasserstein", True)
    assert p_value["empty"]["higher_is_drift"] is None
