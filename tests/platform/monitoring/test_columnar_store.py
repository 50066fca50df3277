"""The columnar store (DRIFTWATCH_SAMPLE_SOURCE=columnar) against the real database: a window of
the samples sent, each once, retries idempotent, a failed request's part collected, hours
pruned, only the columns asked for, embeddings as float32 rows, compaction, and the move of an
older install's JSON rows into parts (the command, then the migration that drops their columns)."""

import importlib
import io
import threading
from datetime import timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from django.core.management import CommandError, call_command
from django.db import DataError, connection, models, transaction

from monitoring.checks import quality_check_run
from monitoring.models import CheckState, GroundTruth, PredictionSample, QualityCheck, SamplePart
from monitoring.samples import WindowBounds
from monitoring.services import labels_ingest, predictions_ingest
from monitoring.store import source as columnar_source
from monitoring.store.collect import parts_collect
from monitoring.store.compaction import labels_meet_predictions, parts_compact_due
from monitoring.store.migrate import legacy_columns, store_counts
from monitoring.store.source import ColumnarSampleSource, UnmovedSamples, window_parts
from monitoring.window import range_window
from registry.models import RegisteredModel
from registry.reference import LABEL, PREDICTION, PROBA_PREFIX
from registry.services import model_register
from tests.clock import T0
from tests.platform.monitoring.factories import json_rows_send, monitored_model, rows, send
from workers.features.registry import feature_type

pytestmark = pytest.mark.django_db
HOUR = timedelta(hours=1)


def _files(root: Path) -> list[Path]:
    return sorted(p for p in (root / "samples").rglob("*") if p.is_file())


def _load(model: RegisteredModel, start: Any, end: Any, **kw: Any) -> dict[str, Any]:
    return ColumnarSampleSource().load(model=model, window=WindowBounds(start, end, **kw)).arrays


def _sorted(arrays: dict[str, Any]) -> pd.DataFrame:
    """The window by sample id; the ids as Python strings (the columnar source keeps Arrow's)."""
    frame = pd.DataFrame(arrays).sort_values("sample_id").reset_index(drop=True)
    return frame.assign(sample_id=frame["sample_id"].astype(object))


def _sent(data: list[dict[str, Any]], prefix: str, step: timedelta, labelled: bool) -> pd.DataFrame:
    """What ``send`` sends, as the window's columns should hold it."""
    return pd.DataFrame(
        {
            "sample_id": [f"{prefix}{i}" for i in range(len(data))],
            "timestamp": pd.DatetimeIndex([T0 + i * step for i in range(len(data))]),
            **{name: [r["features"][name] for r in data] for name in ("x1", "x2", "segment")},
            PREDICTION: [r["prediction"] for r in data],
            LABEL: [r["label"] if labelled else np.nan for r in data],
            **{PROBA_PREFIX + c: [r["probabilities"][c] for r in data] for c in ("0", "1")},
        }
    )


@pytest.mark.parametrize(
    "bounds",
    [
        {"start": T0, "end": T0 + 3 * HOUR},
        {"start": T0 + timedelta(minutes=30), "end": T0 + HOUR + timedelta(minutes=10)},
        {"start": None, "end": T0 + 3 * HOUR, "last_n": 150},
        {"start": None, "end": T0 + HOUR, "last_n": 90, "labelled_only": True},
    ],
)
def test_a_window_holds_the_samples_sent_within_its_bounds(columnar: Path, bounds: dict[str, Any]) -> None:
    """Labelled samples every 30 s and unlabelled ones every 41 s over two hours: the window's
    rows are those its bounds take (a time range; the newest N, of the labelled with
    labelled_only), with the values sent and a label receipt time where a label came."""
    data, model = rows(300, seed=4), monitored_model("col", reference_rows=100)
    send(model, data[:200], start=T0, prefix="a", step=timedelta(seconds=30))  # 100 min: 2 hours
    send(model, data[200:], start=T0, prefix="b", labelled=False, step=timedelta(seconds=41))
    sent = pd.concat(
        [
            _sent(data[:200], "a", timedelta(seconds=30), True),
            _sent(data[200:], "b", timedelta(seconds=41), False),
        ]
    )
    window = WindowBounds(**bounds)
    want = sent[sent["timestamp"] < window.end]
    if window.start is not None:
        want = want[want["timestamp"] >= window.start]
    if window.labelled_only:
        want = want[want[LABEL].notna()]
    if window.last_n is not None:
        want = want.sort_values("timestamp").tail(window.last_n)
    got = _sorted(_load(model, **bounds))
    assert len(got) == len(want) > 0 and SamplePart.objects.filter(model=model).count() >= 2
    pd.testing.assert_frame_equal(
        got[list(want.columns)], _sorted(want.to_dict("list")), check_dtype=False, check_index_type=False
    )
    assert got["version_id"].isna().all()
    assert (got["label_received_at"].notna() == got[LABEL].notna()).all()


def test_a_retried_request_counts_duplicates_and_keeps_no_second_part(
    columnar: Path, django_capture_on_commit_callbacks: Any
) -> None:
    model = monitored_model("sea", reference_rows=100)
    send(model, rows(50, seed=2), start=T0, prefix="a")
    with django_capture_on_commit_callbacks(execute=True):
        send(model, rows(50, seed=2), start=T0, prefix="a")
    assert SamplePart.objects.filter(model=model).count() == 1
    assert len(_files(columnar)) == 1  # the retry's all-duplicate part was deleted on commit
    assert len(_load(model, T0, T0 + HOUR)["sample_id"]) == 50


def test_an_overlapping_batch_is_read_once_per_sample(columnar: Path) -> None:
    model = monitored_model("sea", reference_rows=100)
    body = [
        {
            "id": f"s{i}",
            "timestamp": (T0 + timedelta(seconds=i)).isoformat(),
            "features": r["features"],
            "prediction": r["prediction"],
            "probabilities": r["probabilities"],
        }
        for i, r in enumerate(rows(150, seed=3))
    ]
    first = predictions_ingest(model=model, body={"samples": body[:100]})
    second = predictions_ingest(model=model, body={"samples": body[50:]})
    assert (first.accepted, second.accepted, second.duplicates) == (100, 50, 50)
    dirty = SamplePart.objects.get(model=model, indexed=50)
    assert dirty.rows == 100 and not dirty.is_clean
    ids = _load(model, T0, T0 + HOUR)["sample_id"]
    assert len(ids) == 150 and len(set(ids)) == 150


def test_a_failed_requests_part_is_never_read_and_is_collected_after_the_grace(columnar: Path) -> None:
    model = monitored_model("sea", reference_rows=100)
    with pytest.raises(RuntimeError, match="after the write"):
        with transaction.atomic():
            send(model, rows(40, seed=2), start=T0, prefix="a", labelled=False)
            raise RuntimeError("the request failed after the write")
    assert not PredictionSample.objects.exists() and not SamplePart.objects.exists()
    (orphan,) = _files(columnar)
    assert len(_load(model, T0, T0 + HOUR)["sample_id"]) == 0
    assert parts_collect() == 0  # within the grace: its request may still commit
    send(model, rows(10, seed=5), start=T0, prefix="b", labelled=False)
    assert parts_collect(now=pd.Timestamp.now(tz="UTC") + 2 * HOUR) == 1
    assert not orphan.exists() and len(_files(columnar)) == 1  # the committed part stays
    assert len(_load(model, T0, T0 + HOUR)["sample_id"]) == 10


def test_parts_are_per_hour_and_a_window_reads_only_its_hours(columnar: Path) -> None:
    model = monitored_model("sea", reference_rows=100)
    send(model, rows(180, seed=2), start=T0, prefix="a", step=timedelta(minutes=1))  # 3 hours
    assert sorted(SamplePart.objects.values_list("bucket", flat=True)) == [T0, T0 + HOUR, T0 + 2 * HOUR]
    assert len(window_parts(model, T0 + HOUR + timedelta(minutes=5), T0 + 2 * HOUR)) == 1
    loaded = _load(model, T0 + HOUR + timedelta(minutes=5), T0 + 2 * HOUR)
    assert len(loaded["sample_id"]) == 55


def test_the_source_reads_only_the_features_asked_for(columnar: Path) -> None:
    model = monitored_model("sea", reference_rows=100)
    send(model, rows(30, seed=2), start=T0, prefix="a")
    loaded = ColumnarSampleSource().load(model=model, window=WindowBounds(T0, T0 + HOUR), columns=["x1"])
    assert "x1" in loaded.arrays and "x2" not in loaded.arrays and "segment" not in loaded.arrays
    assert loaded.arrays["x1"].dtype == np.float64 and sum(v is not None for v in loaded.labels) == 30


def test_embeddings_come_back_as_float32_rows_of_one_matrix(columnar: Path) -> None:
    model = model_register(
        data={
            "name": "emb",
            "task": "regression",
            "features": [{"name": "e", "type": "embedding", "dim": 8}, {"name": "x", "type": "numerical"}],
        }
    )
    vectors = np.random.default_rng(0).normal(size=(20, 8)).astype("float32")
    body = [
        {
            "id": f"s{i}",
            "timestamp": (T0 + timedelta(seconds=i)).isoformat(),
            "features": {"e": vectors[i].tolist(), "x": float(i)},
            "prediction": 0.5,
        }
        for i in range(20)
    ]
    predictions_ingest(model=model, body={"samples": body})
    loaded = _load(model, T0, T0 + HOUR)
    got = np.vstack(loaded["e"])
    assert loaded["e"][0].dtype == np.float32 and loaded["e"][0].base is not None
    np.testing.assert_array_equal(got[np.argsort(loaded["x"])], vectors)
    assert loaded[PREDICTION].dtype == np.float64 and np.isnan(loaded[LABEL]).all()


def test_embeddings_of_several_parts_and_missing_rows_come_back_in_place(columnar: Path) -> None:
    """Each part's rows are views of that part's matrix (no copy of the window): a window of
    three parts, one row missing its vector, reads back every vector in place and None there."""
    model = model_register(
        data={
            "name": "emb-parts",
            "task": "regression",
            "features": [
                {"name": "e", "type": "embedding", "dim": 4, "missing": "allow"},
                {"name": "x", "type": "numerical"},
            ],
        }
    )
    vectors = np.random.default_rng(1).normal(size=(9, 4)).astype("float32")
    for k in range(3):
        body = [
            {
                "id": f"s{i}",
                "timestamp": (T0 + timedelta(seconds=i)).isoformat(),
                "features": {"e": None if i == 4 else vectors[i].tolist(), "x": float(i)},
                "prediction": 0.5,
            }
            for i in range(3 * k, 3 * k + 3)
        ]
        predictions_ingest(model=model, body={"samples": body})
    assert SamplePart.objects.filter(model=model).count() == 3
    loaded = _load(model, T0, T0 + HOUR)
    by_x = dict(zip(loaded["x"].tolist(), loaded["e"], strict=True))
    assert by_x[4.0] is None and len(by_x) == 9
    for i in (0, 1, 2, 3, 5, 6, 7, 8):
        assert by_x[float(i)].dtype == np.float32
        np.testing.assert_array_equal(by_x[float(i)], vectors[i])


def test_compaction_merges_an_hours_parts_into_one_and_the_window_is_unchanged(
    columnar: Path, django_capture_on_commit_callbacks: Any
) -> None:
    model = monitored_model("sea", reference_rows=100)
    for k in range(3):
        send(model, rows(40, seed=k), start=T0 + timedelta(minutes=k), prefix=f"p{k}-")
    with django_capture_on_commit_callbacks(execute=True):
        send(model, rows(40, seed=0), start=T0, prefix="p0-")  # a retry: no part
    before = _sorted(_load(model, T0, T0 + HOUR))
    assert parts_compact_due() == 1 and parts_compact_due() == 0  # a re-run has nothing to do
    (live,) = SamplePart.objects.filter(retired_at__isnull=True)
    assert live.compacted and live.rows == live.indexed == 120
    pd.testing.assert_frame_equal(_sorted(_load(model, T0, T0 + HOUR)), before)
    assert parts_collect(now=pd.Timestamp.now(tz="UTC") + 2 * HOUR) == 3
    assert len(_files(columnar)) == 1 and SamplePart.objects.count() == 1
    assert PROBA_PREFIX + "1" in before.columns


def test_the_migration_command_moves_json_rows_into_parts_verified_and_resumable(columnar: Path) -> None:
    """An install from before the columnar store: its samples as JSON rows (no part). Moved in
    batches, verified, they read as the same samples sent to the columnar store do; a second run
    has nothing to move."""
    data = rows(250, seed=2)
    old, direct = monitored_model("sea", reference_rows=100), monitored_model("direct", reference_rows=100)
    json_rows_send(old, data, start=T0, prefix="a", step=timedelta(seconds=20))  # 2 hours
    send(direct, data, start=T0, prefix="a", step=timedelta(seconds=20))
    out = io.StringIO()
    call_command("samples_to_columnar", "--batch", "100", stdout=out)
    assert "sea: moved 250; index 250, in parts 250, left 0" in out.getvalue() and "ok" in out.getvalue()
    assert "direct: moved 0; index 250, in parts 250, left 0" in out.getvalue()
    assert not PredictionSample.objects.filter(part__isnull=True).exists()
    # Oldest first, 100 rows a batch: one part per hour each batch's rows span.
    hours = [
        {(T0 + i * timedelta(seconds=20)).replace(minute=0, second=0) for i in range(k, min(k + 100, 250))}
        for k in (0, 100, 200)
    ]
    assert SamplePart.objects.filter(model=old).count() == sum(map(len, hours))
    moved, want = _sorted(_load(old, T0, T0 + 3 * HOUR)), _sorted(_load(direct, T0, T0 + 3 * HOUR))
    # The two models' labels arrived moments apart: their receipt times differ, not which have one.
    pd.testing.assert_frame_equal(
        moved.drop(columns="label_received_at"), want.drop(columns="label_received_at")
    )
    assert (moved["label_received_at"].notna() == want["label_received_at"].notna()).all()
    out = io.StringIO()
    call_command("samples_to_columnar", stdout=out)  # a second run has nothing left to move
    assert "sea: moved 0; index 250" in out.getvalue()


def test_an_upgraded_install_refuses_a_window_holding_unmoved_samples_until_they_are_moved(
    columnar: Path,
) -> None:
    """Samples stored as JSON rows before the columnar store have no part: a check over a window
    holding any fails naming the command (never a check on part of the window); windows without
    any run, and after the command the same window runs on every sample."""
    model = monitored_model("sea", reference_rows=100)
    json_rows_send(model, rows(120, seed=2), start=T0, prefix="old", step=timedelta(seconds=20))
    send(model, rows(90, seed=3), start=T0 + 2 * HOUR, prefix="new", step=timedelta(seconds=20))
    both, new_only = range_window(T0, T0 + 3 * HOUR), range_window(T0 + 2 * HOUR, T0 + 3 * HOUR)
    with pytest.raises(UnmovedSamples, match="samples_to_columnar"):
        quality_check_run(model_id=model.pk, window=both)
    failed = QualityCheck.objects.get(model=model, window_spec=both.spec)
    assert failed.state == CheckState.FAILED and "samples_to_columnar" in failed.error
    assert (
        QualityCheck.objects.get(pk=quality_check_run(model_id=model.pk, window=new_only).pk).n_samples == 90
    )
    assert len(_load(model, None, T0 + 3 * HOUR, last_n=50)["sample_id"]) == 50  # all moved
    with pytest.raises(UnmovedSamples):  # the newest 150 reach back into the unmoved hour
        _load(model, None, T0 + 3 * HOUR, last_n=150)
    call_command("samples_to_columnar", stdout=io.StringIO())
    assert len(_load(model, None, T0 + 3 * HOUR, last_n=150)["sample_id"]) == 150
    QualityCheck.objects.filter(pk=failed.pk).delete()
    assert QualityCheck.objects.get(pk=quality_check_run(model_id=model.pk, window=both).pk).n_samples == 210


def test_the_migration_command_fails_naming_a_model_whose_index_and_parts_hold_other_ids(
    columnar: Path,
) -> None:
    """The checksums compare the ids themselves: an index row renamed (the counts still equal)
    fails the check, and the command names the model."""
    model = monitored_model("sea", reference_rows=100)
    send(model, rows(30, seed=2), start=T0, prefix="a")
    counts = store_counts(model=model)
    assert counts.consistent and counts.indexed == counts.in_parts == 30
    PredictionSample.objects.filter(model=model, sample_id="a7").update(sample_id="z7")
    counts = store_counts(model=model)
    assert (counts.indexed, counts.in_parts) == (30, 30) and not counts.consistent
    out = io.StringIO()
    with pytest.raises(CommandError, match=r"not verified: \['sea'\]"):
        call_command("samples_to_columnar", stdout=out)
    assert "sea: moved 0; index 30, in parts 30, left 0" in out.getvalue() and "MISMATCH" in out.getvalue()


def test_the_migration_command_says_so_when_rows_without_a_part_have_no_json_left(columnar: Path) -> None:
    """Past migration 0031 there is nothing to move a row without a part from: an error naming
    the model, nothing written."""
    model = monitored_model("sea", reference_rows=100)
    PredictionSample.objects.create(model=model, sample_id="odd", timestamp=T0, received_at=T0, prediction=1)
    with pytest.raises(CommandError, match="'sea' has index rows without a part"):
        call_command("samples_to_columnar", stdout=io.StringIO())
    assert not SamplePart.objects.exists() and not _files(columnar)


DROPPED = [("monitoring", "0031_sample_payload_drop")]
NULLABLE = [("monitoring", "0030_sample_payload_nullable")]


@pytest.mark.django_db(transaction=True)
def test_the_json_columns_are_dropped_only_once_every_sample_is_moved(columnar: Path, migrate: Any) -> None:
    """Migration 0031 refuses, dropping nothing, while a sample is stored only as a JSON row, and
    names the command; moved, the columns go and the samples read as before."""
    model = monitored_model("sea", reference_rows=100)
    send(model, rows(40, seed=3), start=T0 + HOUR, prefix="new")  # columnar: has its part
    migrate(NULLABLE)
    json_rows_send(model, rows(30, seed=2), start=T0, prefix="old")
    with pytest.raises(Exception, match=r"sea: 30\).*samples_to_columnar") as refused:
        migrate(DROPPED)
    assert type(refused.value).__name__ == "SamplesNotMoved"
    assert legacy_columns() and PredictionSample.objects.filter(part__isnull=True).count() == 30
    call_command("samples_to_columnar", stdout=io.StringIO())
    migrate(DROPPED)
    assert not legacy_columns()
    window = _load(model, T0, T0 + 2 * HOUR)
    assert sorted(window["sample_id"]) == sorted(
        [f"old{i}" for i in range(30)] + [f"new{i}" for i in range(40)]
    )


def test_the_migration_command_refuses_an_unknown_model(columnar: Path) -> None:
    with pytest.raises(CommandError, match="nope"):
        call_command("samples_to_columnar", "--model", "nope")


def test_labels_land_on_their_own_samples_in_masked_and_cut_parts(columnar: Path) -> None:
    """Labels are placed by sample id: a part that holds duplicates is read through its mask
    and a part cut by the window's start keeps only some rows, and each label still meets the
    sample it was sent for."""
    model = monitored_model("sea", reference_rows=100)
    data = rows(150, seed=3)
    body = [
        {
            "id": f"s{i}",
            "timestamp": (T0 + timedelta(seconds=20 * i)).isoformat(),
            "features": r["features"],
            "prediction": r["prediction"],
            "probabilities": r["probabilities"],
        }
        for i, r in enumerate(data)
    ]
    predictions_ingest(model=model, body={"samples": body[:100]})
    predictions_ingest(model=model, body={"samples": body[50:]})  # its part masks s50..s99
    labelled = [i for i in range(150) if i % 3]  # every third sample waits for its label
    labels_ingest(
        model=model, body={"labels": [{"id": f"s{i}", "label": data[i]["label"]} for i in labelled]}
    )
    assert SamplePart.objects.filter(model=model, indexed__lt=models.F("rows")).exists()
    got = _load(model, T0 + timedelta(seconds=20 * 30 + 5), T0 + HOUR)  # cut inside both parts
    ids = [int(s[1:]) for s in got["sample_id"]]
    assert sorted(ids) == list(range(31, 150))
    for i, label, received in zip(ids, got[LABEL], got["label_received_at"], strict=True):
        if i in labelled:
            assert label == data[i]["label"] and not pd.isna(received), i
        else:
            assert pd.isna(label) and pd.isna(received), i


def test_labels_come_back_with_their_values_and_known_times_exactly(columnar: Path) -> None:
    """A regression label's value and every label's known time (the client's timestamp when it
    sent one, else the arrival), to the microsecond, as GroundTruth holds them."""
    model = model_register(
        data={"name": "reg", "task": "regression", "features": [{"name": "x", "type": "numerical"}]}
    )
    body = [
        {
            "id": f"s{i}",
            "timestamp": (T0 + timedelta(seconds=i)).isoformat(),
            "features": {"x": i},
            "prediction": 1.0,
        }
        for i in range(12)
    ]
    predictions_ingest(model=model, body={"samples": body})
    stamped = T0 + timedelta(minutes=5, microseconds=123_457)
    labels_ingest(
        model=model,
        body={
            "labels": [
                {"id": "s1", "label": -2.5e-7, "timestamp": stamped.isoformat()},
                {"id": "s4", "label": 1e300},
                {"id": "s7", "label": 3},
            ]
        },
    )
    got = _load(model, T0, T0 + HOUR)
    by_id = dict(zip(got["sample_id"], zip(got[LABEL], got["label_received_at"], strict=True), strict=True))
    stored = {g.sample_id: g for g in GroundTruth.objects.filter(model=model)}
    assert by_id["s1"] == (-2.5e-7, pd.Timestamp(stamped))
    for sample_id in ("s4", "s7"):
        assert by_id[sample_id] == (
            float(stored[sample_id].label),
            pd.Timestamp(stored[sample_id].received_at),
        )
    assert all(np.isnan(label) and pd.isna(at) for s, (label, at) in by_id.items() if s not in stored)


def test_a_compaction_between_the_parts_and_the_labels_changes_nothing(
    columnar: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The parts are listed in one statement and the labels read in another: a compaction that
    commits in between moves the labels' samples to a part the listing does not hold. Labels
    are placed by sample id, which no compaction moves: the window comes back as it was, read
    once."""
    model = monitored_model("sea", reference_rows=100)
    for k in range(3):
        send(model, rows(40, seed=k), start=T0 + timedelta(minutes=k), prefix=f"p{k}-")
    before = _sorted(_load(model, T0, T0 + HOUR))
    assert before[LABEL].notna().sum() == 120
    reads = []
    window_labels = columnar_source.window_labels

    def compacted_first(*args: Any) -> Any:
        if not reads:
            assert parts_compact_due() == 1
        reads.append(args)
        return window_labels(*args)

    monkeypatch.setattr(columnar_source, "window_labels", compacted_first)
    after = _sorted(_load(model, T0, T0 + HOUR))
    assert len(reads) == 1 and SamplePart.objects.filter(model=model, retired_at__isnull=True).count() == 1
    pd.testing.assert_frame_equal(after, before)


def test_a_label_sent_before_its_prediction_lands_and_is_given_its_time_by_the_compaction_task(
    columnar: Path,
) -> None:
    """A label that comes first has no prediction time yet: a window still finds it, through the
    predictions, and the compaction task's sweep then gives it its prediction's timestamp (a
    label whose prediction never came keeps waiting, and no window shows it)."""
    model = monitored_model("sea", reference_rows=100)
    data = rows(60, seed=5)
    labels_ingest(
        model=model,
        body={
            "labels": [{"id": f"w-{i}", "label": data[i]["label"]} for i in range(0, 60, 2)]
            + [{"id": "never", "label": data[0]["label"]}]
        },
    )
    assert GroundTruth.objects.filter(model=model, sample_at__isnull=True).count() == 31
    send(model, data, start=T0 + timedelta(minutes=90), prefix="w-", labelled=False)
    waiting = _sorted(_load(model, T0, T0 + 3 * HOUR))
    assert waiting[LABEL].notna().sum() == 30
    assert labels_meet_predictions() == 30
    stored = {g.sample_id: g.sample_at for g in GroundTruth.objects.filter(model=model)}
    predicted = dict(PredictionSample.objects.filter(model=model).values_list("sample_id", "timestamp"))
    assert stored.pop("never") is None and stored == {k: predicted[k] for k in stored}
    pd.testing.assert_frame_equal(_sorted(_load(model, T0, T0 + 3 * HOUR)), waiting)
    assert labels_meet_predictions() == 0


def test_each_label_lands_on_its_own_sample_among_its_hours_rows(columnar: Path) -> None:
    """Labels are placed an hour at a time (each among its prediction's hour's rows): samples sent
    with a +05:30 offset (hours that are not the local ones) on the hours' edges, over three hours
    and several parts per hour, some labels before their predictions (placed through the join),
    one for a sample another model holds: every label on its own sample, no other row labelled,
    the same after the hours are compacted."""
    model, other = monitored_model("sea", reference_rows=100), monitored_model("other", reference_rows=100)
    india = timezone(timedelta(hours=5, minutes=30))
    micro = timedelta(microseconds=1)
    times = [T0, T0 + HOUR - micro, T0 + HOUR, T0 + 2 * HOUR - micro, T0 + 2 * HOUR, T0 + 3 * HOUR - micro]
    times += [T0 + timedelta(seconds=119 * k) for k in range(90)]
    data = rows(len(times), seed=9)
    labels = {f"e{k}": (k * 7 + 3) % 2 for k in range(0, len(times), 3)}  # not the factory's truth
    early = {key: value for key, value in list(labels.items())[::2]}
    labels_ingest(model=model, body={"labels": [{"id": k, "label": v} for k, v in early.items()]})
    samples = [
        {
            "id": f"e{k}",
            "timestamp": t.astimezone(india).isoformat(),
            "features": r["features"],
            "prediction": r["prediction"],
            "probabilities": r["probabilities"],
        }
        for k, (t, r) in enumerate(zip(times, data, strict=True))
    ]
    for batch in (samples[0::3], samples[1::3], samples[2::3]):  # each batch spans all three hours
        predictions_ingest(model=model, body={"samples": batch})
    predictions_ingest(model=other, body={"samples": samples[:5]})
    late = [{"id": k, "label": v} for k, v in labels.items() if k not in early]
    labels_ingest(model=model, body={"labels": late})
    labels_ingest(model=other, body={"labels": [{"id": "e1", "label": 1}]})
    assert SamplePart.objects.filter(model=model, retired_at__isnull=True).count() == 9

    def placed() -> dict[str, Any]:
        window = _sorted(_load(model, T0, T0 + 3 * HOUR))
        assert len(window) == len(times)
        return {k: v for k, v in zip(window["sample_id"], window[LABEL], strict=True) if pd.notna(v)}

    assert placed() == labels
    assert labels_meet_predictions() == len(early) and parts_compact_due() == 3
    assert SamplePart.objects.filter(model=model, retired_at__isnull=True).count() == 3
    assert placed() == labels


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's cap on one value")
def test_labels_over_one_values_cap_are_read_in_halves(
    columnar: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A window's labels are one bytea value of ids: where PostgreSQL refuses one over its cap,
    the window is read in halves (in savepoints: the transaction goes on), down to ranges it
    takes, and comes back the same as read in one."""
    import psycopg

    model = monitored_model("sea", reference_rows=100)
    for k in range(4):
        send(model, rows(30, seed=k), start=T0 + k * HOUR + timedelta(minutes=1), prefix=f"h{k}-")
    whole = _sorted(_load(model, None, T0 + 4 * HOUR))
    read = columnar_source._labels_read
    spans = []

    def capped(model: RegisteredModel, start: Any, end: Any, share: Any = None) -> Any:
        if start is None or end - start > HOUR:  # fails in PostgreSQL: the transaction is aborted
            with pytest.raises(DataError), connection.cursor() as cursor:
                cursor.execute("SELECT 1 / 0")
            raise psycopg.errors.ProgramLimitExceeded("out of memory")
        spans.append((start, end))
        return read(model, start, end, share)

    monkeypatch.setattr(columnar_source, "_labels_read", capped)
    with transaction.atomic():
        split = _sorted(_load(model, None, T0 + 4 * HOUR))
        assert GroundTruth.objects.filter(model=model).count() == 120  # the transaction is usable
    assert split[LABEL].notna().sum() == whole[LABEL].notna().sum() == 120
    pd.testing.assert_frame_equal(split, whole)
    assert len(spans) == 4 and all(end - start == HOUR for start, end in spans)


@pytest.mark.skipif(connection.vendor != "postgresql", reason="concurrent reads are PostgreSQL's")
@pytest.mark.django_db(transaction=True)
def test_a_large_windows_labels_are_read_meanwhile_in_halves_on_their_own_connections(
    columnar: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past CONCURRENT_LABELS_ROWS (here any window), a window read outside a transaction reads
    its labels in two halves on two threads' connections while the parts are read: the same
    window as read on one connection, a label that came before its prediction included, the
    threads' connections closed; inside a transaction it reads them on its own connection (the
    others could not see its uncommitted rows)."""
    model = monitored_model("sea", reference_rows=100)
    for k in range(4):
        send(model, rows(30, seed=k), start=T0 + k * HOUR + timedelta(minutes=1), prefix=f"h{k}-")
    data = rows(10, seed=9)
    labels_ingest(
        model=model, body={"labels": [{"id": f"first-{i}", "label": data[i]["label"]} for i in range(10)]}
    )
    send(model, data, start=T0 + 2 * HOUR + timedelta(minutes=30), prefix="first-", labelled=False)
    one = _sorted(_load(model, None, T0 + 4 * HOUR))
    assert one[LABEL].notna().sum() == 130
    apart, threads = columnar_source._labels_apart, []

    def recorded(*args: Any) -> Any:
        threads.append(threading.current_thread().name)
        return apart(*args)

    monkeypatch.setattr(columnar_source, "_labels_apart", recorded)
    monkeypatch.setattr(columnar_source, "CONCURRENT_LABELS_ROWS", 1)
    backends = "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
    with connection.cursor() as cursor:
        cursor.execute(backends)
        (before,) = cursor.fetchone()
    pd.testing.assert_frame_equal(_sorted(_load(model, None, T0 + 4 * HOUR)), one)
    pd.testing.assert_frame_equal(
        _sorted(_load(model, T0 + HOUR, T0 + 3 * HOUR)),
        one[(one["timestamp"] >= T0 + HOUR) & (one["timestamp"] < T0 + 3 * HOUR)].reset_index(drop=True),
    )
    assert len(threads) == 4 and all(name.startswith("labels") for name in threads)
    with connection.cursor() as cursor:
        cursor.execute(backends)
        assert cursor.fetchone()[0] == before  # each thread's connection closed
    with transaction.atomic():
        send(model, rows(5, seed=11), start=T0 + 3 * HOUR + timedelta(minutes=5), prefix="uncommitted-")
        inside = _sorted(_load(model, None, T0 + 4 * HOUR))
    assert len(threads) == 4 and inside[LABEL].notna().sum() == 135


@pytest.mark.django_db(transaction=True)
def test_labels_of_ids_in_many_scripts_land_on_their_own_samples_read_whole_or_in_halves(
    columnar: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sample ids of one to four bytes a character (and a combining accent beside its composed
    twin): each label on its own sample, read in one statement and, on PostgreSQL, in two halves
    on their own connections (the ids come back as their UTF-8 bytes, cut by their byte lengths)."""
    model = monitored_model("sea", reference_rows=100)
    names = ["é", "e\u0301", "日本", "🙂", "ß-ﬁ", "a", "Ω\u200d", "中🙂é"]
    ids = [f"{name}{k}" for k in range(6) for name in names]
    data = rows(len(ids), seed=4)
    samples = [
        {
            "id": sample_id,
            "timestamp": (T0 + timedelta(seconds=61 * k)).isoformat(),
            "features": row["features"],
            "prediction": row["prediction"],
            "probabilities": row["probabilities"],
        }
        for k, (sample_id, row) in enumerate(zip(ids, data, strict=True))
    ]
    predictions_ingest(model=model, body={"samples": samples})
    labels = {sample_id: (k * 5 + 1) % 2 for k, sample_id in enumerate(ids) if k % 3}
    labels_ingest(model=model, body={"labels": [{"id": k, "label": v} for k, v in labels.items()]})

    def placed() -> dict[str, Any]:
        window = _sorted(_load(model, T0, T0 + HOUR))
        assert sorted(window["sample_id"]) == sorted(ids)
        return {k: v for k, v in zip(window["sample_id"], window[LABEL], strict=True) if pd.notna(v)}

    assert placed() == labels
    if connection.vendor == "postgresql":
        apart, shares = columnar_source._labels_apart, []
        monkeypatch.setattr(columnar_source, "CONCURRENT_LABELS_ROWS", 1)
        monkeypatch.setattr(
            columnar_source, "_labels_apart", lambda *args: shares.append(args[-1]) or apart(*args)
        )
        assert placed() == labels
        assert sorted(shares) == [(0, 2), (1, 2)]


def test_the_migration_gives_stored_labels_their_predictions_time(columnar: Path) -> None:
    """Migration 0024's backfill, run again on labels stored without a time: each label whose
    prediction is in takes its timestamp; one without stays waiting."""
    migration = importlib.import_module("monitoring.migrations.0024_label_sample_at")
    model = monitored_model("sea", reference_rows=100)
    send(model, rows(20, seed=1), start=T0, prefix="m-")
    labels_ingest(model=model, body={"labels": [{"id": "orphan", "label": 1}]})
    GroundTruth.objects.filter(model=model).update(sample_at=None)
    with connection.cursor() as cursor:
        cursor.execute(migration.BACKFILL)
    predicted = dict(PredictionSample.objects.filter(model=model).values_list("sample_id", "timestamp"))
    stored = dict(GroundTruth.objects.filter(model=model).values_list("sample_id", "sample_at"))
    assert stored.pop("orphan") is None and len(stored) > 0
    assert stored == {k: predicted[k] for k in stored}


@pytest.mark.parametrize("name", ["categorical", "text"])
def test_a_text_column_typed_by_its_distinct_values_equals_it_typed_row_by_row(name: str) -> None:
    """Categories and texts are typed once per distinct value, then spread over the rows: the
    same values as typing every row, over several chunks, with nulls, JSON texts of numbers,
    an empty string, a column of nulls only and an empty one."""
    kind = feature_type(name)
    values = ["a", None, "b", "a", "", "1.5", None, "b", "é", "a"]
    for chunks in ([values], [values[:4], values[4:]], [[None, None]], [[]]):
        column = pa.chunked_array([pa.array(c, pa.string()) for c in chunks], pa.string())
        want = kind.column(pd.Series(column.to_numpy(), copy=False)).to_numpy()
        got = columnar_source._by_distinct(kind, column)
        assert got.dtype == want.dtype and got.tolist() == want.tolist()


@pytest.mark.django_db
def test_the_index_rows_references_are_kept_by_django_without_a_trigger_per_row(columnar: Path) -> None:
    """The index table has no database foreign key (no check per inserted row), yet its
    references hold through every delete: a part its rows point to is not deleted (RESTRICT),
    a version's deletion leaves its samples unversioned, and the model's takes them all."""
    from django.db.models import RestrictedError

    from registry.models import ModelVersion

    model = monitored_model("sea", reference_rows=100)
    version = ModelVersion.objects.create(model=model, version=1)
    data = rows(20, seed=3)
    samples = [
        {"id": f"v-{i}", "timestamp": (T0 + timedelta(seconds=i)).isoformat(), "version": 1,
         "features": r["features"], "prediction": r["prediction"], "probabilities": r["probabilities"]}
        for i, r in enumerate(data)
    ]  # fmt: skip
    predictions_ingest(model=model, body={"samples": samples})
    part = SamplePart.objects.get(model=model)
    with pytest.raises(RestrictedError):
        SamplePart.objects.filter(pk=part.pk).delete()
    assert (
        SamplePart.objects.filter(pk=part.pk).exists()
        and PredictionSample.objects.filter(part=part).count() == 20
    )
    version.delete()
    assert set(PredictionSample.objects.filter(model=model).values_list("version_id", flat=True)) == {None}
    model.delete()
    assert not PredictionSample.objects.exists() and not SamplePart.objects.exists()
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_constraint WHERE conrelid = 'monitoring_predictionsample'::regclass"
                " AND contype = 'f'"
            )
            assert cursor.fetchone()[0] == 0


def test_part_times_become_aware_nanoseconds_as_pandas_made_them_and_out_of_range_is_refused() -> None:
    """The parts' microseconds, cast by Arrow and taken by pandas as integers, equal pandas' own
    unit change (before 1970, at a microsecond, across chunks, empty); a time past what
    nanoseconds hold is refused as pandas refused it, not wrapped around."""
    micros = [[-(10**15), -1, 0, 1], [], [1_796_000_000_123_456, 7_000_000_000_000_000]]
    column = pa.chunked_array([pa.array(c, pa.timestamp("us", tz="UTC")) for c in micros])
    got = columnar_source._times(column)
    assert str(got.dtype) == "datetime64[ns, UTC]"
    assert list(got) == list(pd.DatetimeIndex(column.to_pandas()).as_unit("ns"))
    assert len(columnar_source._times(pa.chunked_array([], pa.timestamp("us", tz="UTC")))) == 0
    past = pa.chunked_array([pa.array([0, 9_300_000_000_000_000], pa.timestamp("us", tz="UTC"))])
    with pytest.raises(pd.errors.OutOfBoundsDatetime):
        columnar_source._times(past)
