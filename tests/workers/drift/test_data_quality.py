"""Missing values, out-of-schema categories and the broken-feed flag."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from workers.drift import summarize_reference
from workers.drift.data_quality import data_quality
from workers.drift.summary import ColumnType

COLUMNS: dict[str, ColumnType] = {"age": "numerical", "colour": "categorical"}


def _window(n: int = 100) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    return pd.DataFrame({"age": rng.normal(40, 10, n), "colour": rng.choice(["red", "blue"], n)})


def test_clean_window_is_not_broken() -> None:
    window = _window()
    result = data_quality(window, COLUMNS, categories={"colour": ["red", "blue"]})
    assert not result["broken_feed"] and result["reasons"] == []
    assert result["columns"]["age"]["missing_share"] == 0.0
    assert result["columns"]["colour"]["out_of_schema_share"] == 0.0


def test_inf_none_and_unparsable_values_count_as_missing() -> None:
    window = _window(10).astype({"age": object})
    window.loc[[0, 1, 2], "age"] = [np.inf, None, "n/a"]
    window.loc[[3, 4, 5], "colour"] = [None, -np.inf, np.nan]
    result = data_quality(window, COLUMNS)
    assert result["columns"]["age"]["missing_count"] == 3
    assert result["columns"]["colour"]["missing_count"] == 3
    assert result["broken_feed"] and len(result["reasons"]) == 2


def test_out_of_schema_categories_use_the_reference_schema() -> None:
    reference = _window()
    window = _window()
    window.loc[:9, "colour"] = "GREEN"  # 10% of rows: a renamed category upstream
    categories = summarize_reference(reference, COLUMNS).categories()
    result = data_quality(window, COLUMNS, categories=categories)
    colour = result["columns"]["colour"]
    assert colour["out_of_schema_share"] == 0.1 and colour["out_of_schema_examples"] == ["GREEN"]
    assert result["broken_feed"] and "out-of-schema" in result["reasons"][0]


def test_thresholds_are_configurable_and_reported() -> None:
    window = _window()
    window.loc[:14, "age"] = np.nan  # 15% missing: under the default 20%
    assert not data_quality(window, COLUMNS)["broken_feed"]
    strict = data_quality(window, COLUMNS, max_missing_share=0.1)
    assert strict["broken_feed"] and strict["thresholds"]["max_missing_share"] == 0.1


def test_empty_window_is_broken_and_json_safe() -> None:
    result = data_quality(_window().iloc[:0], COLUMNS, categories={"colour": ["red"]})
    assert result["broken_feed"] and result["reasons"] == ["window holds no rows"]
    json.dumps(result, allow_nan=False)
