"""A very large window's features read one at a time (``window_load(defer_above=)``, what a check
asks for past ``SAMPLE_ABOVE`` rows): the check's result, segments included, equals the one made
with every feature held; each feature is read once; a column is let go before the next is read
(10M rows × 20 features held whole were 1.5 GiB of a check's memory)."""

import gc
import weakref
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from monitoring import checks
from monitoring.checks import check_compute, quality_check_run
from monitoring.models import CheckState, MonitoringPolicy
from monitoring.reference import reference_state
from monitoring.services import labels_ingest
from monitoring.window import Window, range_window, window_load
from registry.models import RegisteredModel
from registry.services import model_register, reference_upload
from tests.clock import T0
from tests.platform.monitoring.factories import check_with_segments, regression_rows, regressor, rows, send
from workers.drift import sorts
from workers.drift.dle import estimate_regressor_metrics_by_block

pytestmark = pytest.mark.django_db
WORDS = ["good", "bad", "fast", "slow", "late", "broken", "fine", "great"]
FEATURES = ["x1", "x2", "segment", "review", "emb"]


def _data(n: int, *, seed: int, shift: float = 0.0) -> list[dict[str, Any]]:
    """The factories' rows (two numbers, a category) with a text, a 3-dim embedding and missing x2."""
    rng = np.random.default_rng(seed + 7)
    out = rows(n, seed=seed, shift=shift)
    for i, r in enumerate(out):
        words = rng.choice(WORDS, rng.integers(1, 6))
        r["features"]["review"] = " ".join(words) + ("!" * int(shift > 0 and i % 3 == 0))
        r["features"]["emb"] = (rng.normal(size=3) + shift).round(5).tolist()
        if i % 17 == 0:
            r["features"]["x2"] = None
    return out


def _model(columnar: Path) -> RegisteredModel:
    model = model_register(
        data={
            "name": "deferred",
            "task": "classification",
            "classes": [0, 1],
            "features": [
                {"name": "x1", "type": "numerical"},
                {"name": "x2", "type": "numerical"},
                {"name": "segment", "type": "categorical"},
                {"name": "review", "type": "text"},
                {"name": "emb", "type": "embedding", "dim": 3},
            ],
        }
    )
    # 2,400 reference rows: the text test (and each x1 segment's) takes its absolute threshold (the
    # percentile one scores a thousand random AUCs, seconds per call); the embedding a permutation test.
    reference_upload(model=model, rows=_data(2400, seed=1))
    MonitoringPolicy.objects.update_or_create(
        model=model,
        defaults={
            "window_kind": "hours",
            "window_size": 2,
            "min_samples": 50,
            "min_labels": 50,
            "cooldown_minutes": 0,
            "embedding_drift_method": "mean_perm",
            "segments": [{"feature": "x1", "bins": [0.0]}],
        },
    )
    data = _data(500, seed=3, shift=0.6)
    send(model, data, start=T0, prefix="s", labelled=False, step=timedelta(seconds=13))
    labels_ingest(
        model=model, body={"labels": [{"id": f"s{i}", "label": data[i]["label"]} for i in range(0, 500, 2)]}
    )
    return model


def _load(model: RegisteredModel, defer_above: int | None, **bounds: Any) -> Window:
    bounds = bounds or {"start": T0, "end": T0 + timedelta(hours=2)}
    return window_load(model=model, defer_above=defer_above, **bounds)


def _result(model: RegisteredModel, window: Window) -> bytes:
    return orjson.dumps(check_with_segments(model, window), option=orjson.OPT_SERIALIZE_NUMPY)


@pytest.mark.parametrize(
    ("sampled", "bounds"),
    [(False, {}), (True, {}), (True, {"start": None, "end": T0 + timedelta(hours=2), "last_n": 420})],
    ids=["range-whole", "range-sampled", "last_n-sampled"],
)
def test_a_check_on_deferred_features_equals_the_check_on_the_whole_window(
    columnar: Path, monkeypatch: pytest.MonkeyPatch, sampled: bool, bounds: dict[str, Any]
) -> None:
    """Every test's result, the drill-downs, the PCA (on all rows, or on a sample of rows taken as
    each column is read) and every segment's check (a deferred window's rows) are the same."""
    if sampled:  # the window's 500 rows are past SAMPLE_ABOVE: its PCA and distances read 300 of them
        monkeypatch.setattr(sorts, "SAMPLE_ABOVE", 350)
        monkeypatch.setattr(sorts, "SAMPLE_SIZE", 300)
    model = _model(columnar)
    whole, deferred = _load(model, None, **bounds), _load(model, 0, **bounds)
    assert whole.deferred is None and deferred.deferred is not None
    assert not set(FEATURES) & set(deferred.frame.columns)  # no feature is held by the window
    assert set(FEATURES) <= set(whole.frame.columns)
    made = _result(model, deferred)
    assert made == _result(model, whole)
    found = orjson.loads(made)
    drift = found["result"]["drift"]
    assert set(drift["columns"]) == set(FEATURES)
    assert set(drift["descriptors"]) == {"review"}
    assert ("sample" in drift["multivariate"]) is sampled
    assert set(found["result"]["distributions"]) >= set(FEATURES)
    assert [v["value"] for v in found["segments"]["x1"]["values"]] == ["<0", ">=0"]


def test_each_deferred_feature_is_read_once_and_let_go_before_the_next(
    columnar: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sampled window's check reads each feature once (the PCA's sample is taken while it is
    read), and no column read for it is still alive when the next one is read."""
    monkeypatch.setattr(sorts, "SAMPLE_ABOVE", 350)
    monkeypatch.setattr(sorts, "SAMPLE_SIZE", 300)
    model = _model(columnar)
    window = _load(model, 0)
    assert window.deferred is not None
    read = window.deferred.read_column
    reads: list[str] = []
    alive: list[weakref.ref[Any]] = []
    most_alive = 0

    def counted(name: str) -> Any:
        nonlocal most_alive
        gc.collect()
        most_alive = max(most_alive, sum(ref() is not None for ref in alive))
        reads.append(name)
        values = read(name)
        alive.append(weakref.ref(values))
        return values

    object.__setattr__(window.deferred, "read_column", counted)
    policy = MonitoringPolicy.objects.get(model=model)
    result = check_compute(model=model, policy=policy, window=window, reference=reference_state(model=model))
    assert sorted(reads) == sorted(FEATURES)
    assert most_alive == 0
    gc.collect()
    assert all(ref() is None for ref in alive)
    assert result["drift"]["multivariate"]["sample"]["rows"] == 300


def test_a_check_past_sample_above_asks_for_deferred_features(
    columnar: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``quality_check_run`` defers a window's features past SAMPLE_ABOVE rows, not below it."""
    model = _model(columnar)
    seen: list[Window] = []

    def load(**kwargs: Any) -> Window:
        seen.append(window_load(**kwargs))
        return seen[-1]

    monkeypatch.setattr(checks, "window_load", load)
    window = range_window(T0, T0 + timedelta(hours=2))
    check = quality_check_run(model_id=model.pk, window=window)
    assert check is not None and check.state == CheckState.DONE and check.n_samples == 500
    assert seen[-1].deferred is None
    monkeypatch.setattr(sorts, "SAMPLE_ABOVE", 350)
    monkeypatch.setattr(sorts, "SAMPLE_SIZE", 300)
    check.delete()
    check = quality_check_run(model_id=model.pk, window=window)
    assert check is not None and check.state == CheckState.DONE and check.n_samples == 500
    assert seen[-1].deferred is not None and "multivariate" in check.drift


def _regression(columnar: Path) -> RegisteredModel:
    """A regressor over two numbers (one with gaps) and a category, its reference labelled (DLE's
    loss model is fitted on it), 500 window rows shifted where its error grows."""
    rng = np.random.default_rng(21)
    model = regressor("price", rng, reference_rows=1500)
    window = regression_rows(rng, 500, 0.8)
    send(model, window, start=T0, prefix="r", labelled=False, step=timedelta(seconds=13))
    return model


@pytest.mark.parametrize(
    "bounds", [{}, {"start": None, "end": T0 + timedelta(hours=2), "last_n": 420}], ids=["range", "last_n"]
)
def test_dle_reads_a_deferred_windows_inputs_a_block_of_rows_at_a_time(
    columnar: Path, monkeypatch: pytest.MonkeyPatch, bounds: dict[str, Any]
) -> None:
    """A regressor's window past DLE_BLOCK_ROWS with its features deferred: DLE reads them a block
    of rows at a time, only those rows (a slice of the parts, or the last N's positions, newest
    first), no column whole, and estimates MAE, MSE and RMSE to the bit as from the window read
    whole."""
    monkeypatch.setattr(checks, "DLE_BLOCK_ROWS", 120)
    model = _regression(columnar)
    reference = reference_state(model=model)
    assert reference is not None and reference.loss_estimator is not None
    whole, deferred = _load(model, None, **bounds), _load(model, 0, **bounds)
    assert deferred.deferred is not None and not {"x", "z", "colour"} & set(deferred.frame.columns)
    columns: list[str] = []
    read: dict[str, list[np.ndarray]] = {"x": [], "z": [], "colour": []}
    found = deferred.deferred
    read_column, read_at = found.read_column, found.read_at
    assert read_at is not None

    def column(name: str) -> Any:
        columns.append(name)
        return read_column(name)

    def rows(name: str, which: Any) -> Any:
        read[name].append(np.arange(which.start, which.stop) if isinstance(which, slice) else which)
        assert len(read[name][-1]) <= 120
        return read_at(name, which)

    deferred.deferred = replace(found, read_column=column, read_at=rows)
    for metric in ("mae", "rmse"):
        estimated = checks._estimate_regression(deferred, reference, metric)
        assert estimated == checks._estimate_regression(whole, reference, metric)
        assert estimated["value"] is not None and estimated["metric"] == metric
    assert not columns
    n = len(whole.frame)
    assert n == (420 if bounds else 500)
    # Each input's rows read once a call, block after block: the window's own rows in its order.
    held = np.arange(n) if found.positions is None else found.positions
    for name, blocks in read.items():
        assert np.array_equal(np.concatenate(blocks), np.r_[held, held]), name


def test_dle_past_sample_above_reads_a_sample_of_rows_and_states_its_error(
    columnar: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past SAMPLE_ABOVE rows DLE's trees score a uniform sample of SAMPLE_SIZE rows: each metric
    says so (rows, of, its error), lies within four stated errors of the estimate from every
    row, and its interval is the wider for it; the window read whole or deferred gives the same.
    The stated error is the sampling's: over 200 draws of the sample the MAE's spread is it."""
    model = _regression(columnar)
    reference = reference_state(model=model)
    assert reference is not None and reference.loss_estimator is not None
    whole = _load(model, None)
    every = checks._estimate_regression(whole, reference, "mae")
    assert "sample" not in every and all("sample" not in m for m in every["metrics"].values())
    monkeypatch.setattr(sorts, "SAMPLE_ABOVE", 350)
    monkeypatch.setattr(sorts, "SAMPLE_SIZE", 200)
    sampled = checks._estimate_regression(whole, reference, "mae")
    assert sampled == checks._estimate_regression(_load(model, 0), reference, "mae")
    assert sampled["sample"] == sampled["metrics"]["mae"]["sample"]
    for name in ("mae", "mse", "rmse"):
        got, full = sampled["metrics"][name], every["metrics"][name]
        assert got["sample"]["rows"] == 200 and got["sample"]["of"] == 500
        error = got["sample"]["error"]
        assert 0 < error and abs(got["value"] - full["value"]) <= 4 * error
        assert got["ci"][1] - got["ci"][0] > full["ci"][1] - full["ci"][0]
        assert got["ci"][0] <= got["value"] <= got["ci"][1]
    frame = whole.frame
    values, errors = [], []
    for seed in range(200):
        rows = np.sort(np.random.default_rng(seed).choice(len(frame), 200, replace=False))
        found = estimate_regressor_metrics_by_block(
            reference.loss_estimator, [frame.iloc[rows]], of=len(frame)
        )
        values.append(found["mae"].value)
        errors.append(found["mae"].sample["error"])  # type: ignore[index]
    assert 0.8 <= np.std(values) / np.mean(errors) <= 1.25
