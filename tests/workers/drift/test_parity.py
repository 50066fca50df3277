"""data_drift's decisions equal evidently 0.7.23 DataDriftPreset's on generated datasets."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from tests.workers.drift.factories import make_frames
from workers.drift import ReferenceSummary, data_drift, summarize_reference
from workers.drift.evidently_adapter import (
    evidently_data_drift,
    evidently_dataset_level_scores,
)
from workers.drift.summary import ColumnType

# (seed, reference rows, current rows, drift). 1000/1001 straddle evidently's small/large
# reference boundary; 1003 rows with 20% missing drop below it for the missing-value columns.
CASES = [
    (1, 200, 300, False),
    (2, 200, 300, True),
    (3, 1000, 800, False),
    (4, 1000, 800, True),
    (5, 1001, 1500, False),
    (6, 1003, 1500, True),
    (7, 4000, 2500, False),
    (8, 4000, 2500, True),
    (9, 600, 5000, True),
    (10, 20000, 700, True),
    (13, 150, 12, True),  # tiny scheduled windows
    (14, 3000, 25, False),
]


def _assert_same(ours, theirs) -> None:
    for name, col in ours.columns.items():
        ev = theirs["columns"][name]
        assert col.method_display == ev["method_display"], name
        assert col.threshold == pytest.approx(ev["threshold"]), name
        assert col.drifted == ev["drifted"], (name, col, ev)
        assert col.score == pytest.approx(float(ev["score"]), rel=1e-6, abs=1e-12), name
    assert ours.share == pytest.approx(theirs["share"])
    assert ours.dataset_drift == theirs["dataset_drift"]


@pytest.mark.parametrize(("seed", "n_reference", "n_current", "drift"), CASES)
def test_decisions_equal_evidently(seed: int, n_reference: int, n_current: int, drift: bool) -> None:
    reference, current, columns = make_frames(seed, n_reference, n_current, drift)
    _assert_same(data_drift(reference, current, columns), evidently_data_drift(reference, current, columns))


def test_cases_cover_every_default_method() -> None:
    methods = set()
    for seed, n_reference, n_current, drift in CASES:
        reference, current, columns = make_frames(seed, n_reference, n_current, drift)
        methods |= {c.method for c in data_drift(reference, current, columns).columns.values()}
    assert methods == {"ks", "chisquare", "z", "jensenshannon", "wasserstein"}


def test_drifted_cases_drift_and_calm_cases_mostly_do_not() -> None:
    reference, current, columns = make_frames(8, 4000, 2500, True)
    assert data_drift(reference, current, columns).dataset_drift
    reference, current, columns = make_frames(7, 4000, 2500, False)
    assert not data_drift(reference, current, columns).dataset_drift


def test_missing_values_decide_small_or_large_reference_by_non_missing_count() -> None:
    reference, current, columns = make_frames(6, 1003, 1500, True)
    result = data_drift(reference, current, columns)
    # 1003 rows, ~20% missing: the column has <= 1000 values, so the small-reference tests apply.
    assert result.columns["num_missing"].n_reference <= 1000
    assert result.columns["num_missing"].method == "ks"
    assert result.columns["num_normal"].method == "wasserstein"


def test_summary_round_trip_gives_identical_result() -> None:
    reference, current, columns = make_frames(4, 1000, 800, True)
    summary = ReferenceSummary.from_bytes(summarize_reference(reference, columns).to_bytes())
    assert data_drift(summary, current, columns) == data_drift(reference, current, columns)


def test_to_dict_is_strict_json() -> None:
    reference, current, columns = make_frames(2, 200, 300, True)
    payload = data_drift(reference, current, columns).to_dict()
    assert json.loads(json.dumps(payload, allow_nan=False)) == payload


def _inf_frames(n: int) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, ColumnType]]:
    rng = np.random.default_rng(11)
    reference = pd.DataFrame({"inf_in_reference": rng.normal(size=n), "inf_in_current": rng.normal(size=n)})
    current = pd.DataFrame({"inf_in_reference": rng.normal(size=n), "inf_in_current": rng.normal(size=n)})
    reference.loc[0, "inf_in_reference"] = np.inf
    current.loc[1, "inf_in_current"] = -np.inf
    return reference, current, {"inf_in_reference": "numerical", "inf_in_current": "numerical"}


def test_inf_is_missing_where_evidently_dataset_level_scores_nan_or_inf() -> None:
    """Documents a deliberate difference from evidently 0.7.23.

    evidently's dataset-level table (behind DriftedColumnsCount and the HTML report) keeps ±inf
    in a column without NaN: an inf in the reference makes the normed Wasserstein NaN (std is
    NaN, so "no drift" whatever the data), an inf in the current makes it inf ("drift" on
    undrifted data). We count ±inf as missing, as evidently's own per-column ValueDrift does.
    """
    reference, current, columns = _inf_frames(3000)
    theirs = evidently_dataset_level_scores(reference, current, columns)
    assert math.isnan(theirs["inf_in_reference"][0]) and not theirs["inf_in_reference"][1]
    assert math.isinf(theirs["inf_in_current"][0]) and theirs["inf_in_current"][1]

    ours = data_drift(reference, current, columns)
    finite = data_drift(
        reference.replace([np.inf, -np.inf], np.nan),
        current.replace([np.inf, -np.inf], np.nan),
        columns,
    )
    assert ours == finite
    assert all(
        c.score is not None and math.isfinite(c.score) and not c.drifted for c in ours.columns.values()
    )
    # evidently's per-column ValueDrift metric drops ±inf too, and agrees with us.
    _assert_value_drift_agrees(ours, evidently_data_drift(reference, current, columns))


def _assert_value_drift_agrees(ours, theirs) -> None:
    for name, col in ours.columns.items():
        assert col.score == pytest.approx(float(theirs["columns"][name]["score"]), rel=1e-6)
        assert col.drifted == theirs["columns"][name]["drifted"]
