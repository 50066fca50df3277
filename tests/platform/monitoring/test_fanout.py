"""A check fanned out over slices of its hours (``monitoring.fanout``): each slice's measures
(sorted numerical values, categorical counts, the PCA's error sum) merge into the check a single
worker makes: every figure equal, the PCA's mean error to float rounding (every row scored, summed
apart). A superseded attempt's slices and merge do nothing; a window that changed between the
slices and the merge is checked whole; a real worker runs the three tasks end to end."""

import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from django.core.files.storage import default_storage
from django.db import connection
from rest_framework.test import APIClient

from monitoring.checks import check_merge_run, quality_check_run
from monitoring.fanout import slice_run
from monitoring.models import CheckSlice, CheckState, MonitoringPolicy, QualityCheck
from monitoring.store.compaction import parts_compact_due
from monitoring.window import range_window, window_load
from registry.models import RegisteredModel
from tests.clock import T0
from tests.platform.monitoring.factories import (
    check_with_segments,
    monitored_model,
    regression_rows,
    regressor,
    rows,
    send,
)

HOUR = timedelta(hours=1)
WINDOW = range_window(T0, T0 + 4 * HOUR)
COMPARED = ("n_samples", "n_labelled", "metrics", "estimated", "prediction_drift", "decisions", "segments")


@pytest.fixture
def fanned(columnar: Path, settings: Any) -> Path:
    """A window of more than 300 samples fans out, slices of at least 250."""
    settings.DRIFTWATCH_CHECK_FANOUT_ROWS = 300
    settings.DRIFTWATCH_CHECK_SLICE_ROWS = 250
    return columnar


def _traffic(name: str, reference_rows: int = 600) -> RegisteredModel:
    """Four hours: 200, 150, 250 (shifted) and 100 samples, some x2 missing, half labelled; the
    first three compacted (with summaries), the last in two requests' parts."""
    model = monitored_model(name, reference_rows=reference_rows, min_samples=50, min_labels=20)
    MonitoringPolicy.objects.filter(model=model).update(segments=[{"feature": "segment"}])
    for hour, (n, shift) in enumerate([(200, 0.0), (150, 0.0), (250, 0.9)]):
        data = rows(n, seed=20 + hour, shift=shift)
        for i in range(0, n, 9):
            data[i]["features"]["x2"] = None
        half = n // 2
        start = T0 + hour * HOUR
        send(model, data[:half], start=start, prefix=f"h{hour}a", step=timedelta(seconds=7))
        send(model, data[half:], start=start + timedelta(minutes=20), prefix=f"h{hour}b", labelled=False)
    assert parts_compact_due() == 3
    late = rows(100, seed=30, shift=0.9)
    send(model, late[:60], start=T0 + 3 * HOUR, prefix="h3a")
    send(model, late[60:], start=T0 + 3 * HOUR + timedelta(minutes=5), prefix="h3b", labelled=False)
    return model


def _single(model: RegisteredModel) -> dict[str, Any]:
    """What one worker computes over the window (the fan-out off)."""
    window = window_load(model=model, start=WINDOW.start, end=WINDOW.end, counted=True)
    found = check_with_segments(model, window)
    return {**found["result"], "segments": found["segments"]}


def _slices_run(row: QualityCheck) -> list[CheckSlice]:
    slices = list(CheckSlice.objects.filter(quality_check=row, attempt=row.attempts).order_by("index"))
    assert [slice_run(piece.pk) for piece in slices] == [True] * len(slices)
    return slices


def _sliced(model: RegisteredModel) -> QualityCheck:
    """The window's check fanned out and its slices run, one after another (not merged yet)."""
    running = quality_check_run(model_id=model.pk, window=WINDOW)
    assert running is not None and running.state == CheckState.RUNNING
    _slices_run(running)
    return running


def _same_as_single(check: QualityCheck, single: dict[str, Any]) -> None:
    for field in COMPARED:
        stored = getattr(check, field)
        if field == "decisions":  # the stored check adds the sequential detector's evidence
            stored = {k: v for k, v in stored.items() if k != "sequential"}
        assert stored == single[field], field
    assert {k: v for k, v in check.data_quality.items() if k != "fanout"} == single["data_quality"]
    drift, expected = dict(check.drift), dict(single["drift"])
    split, whole = drift.pop("multivariate", None), expected.pop("multivariate", None)
    assert drift == expected  # every feature's test and decision
    if whole is not None:
        assert split.pop("score") == pytest.approx(whole.pop("score"), rel=1e-12)
    assert split == whole


@pytest.mark.django_db
def test_a_fanned_out_check_equals_the_check_one_worker_makes(fanned: Path) -> None:
    model = _traffic("sea")
    running = quality_check_run(model_id=model.pk, window=WINDOW)
    assert running is not None and running.state == CheckState.RUNNING  # its slices measure it
    slices = _slices_run(running)
    assert [(s.start, s.end) for s in slices] == [
        (T0, T0 + 2 * HOUR),  # 200 + 150 samples: at least 250
        (T0 + 2 * HOUR, T0 + 3 * HOUR),
        (T0 + 3 * HOUR, T0 + 4 * HOUR),  # the rest
    ]
    assert slice_run(slices[0].pk) is False  # a redelivered slice does nothing twice
    check = check_merge_run(check_id=running.pk, attempt=running.attempts)
    assert check is not None and check.state == CheckState.DONE, check and check.error
    check.refresh_from_db()
    assert check.n_samples == 700 and check.data_quality["fanout"] == {"slices": 3, "merged": True}
    assert (
        check.drift["columns"]["x1"]["drifted"] and check.data_quality["columns"]["x2"]["missing_count"] > 0
    )
    _same_as_single(check, _single(model))
    assert not any(default_storage.exists(s.result) for s in CheckSlice.objects.filter(quality_check=check))
    assert check_merge_run(check_id=running.pk, attempt=running.attempts) is None  # done: nothing again


@pytest.mark.django_db
def test_a_superseded_attempts_slices_and_merge_do_nothing(fanned: Path) -> None:
    model = _traffic("sea")
    running = quality_check_run(model_id=model.pk, window=WINDOW)
    assert running is not None
    old = list(CheckSlice.objects.filter(quality_check=running))
    assert slice_run(old[0].pk)
    QualityCheck.objects.filter(pk=running.pk).update(attempts=running.attempts + 1)  # taken over
    assert [slice_run(piece.pk) for piece in old[1:]] == [False] * (len(old) - 1)
    assert check_merge_run(check_id=running.pk, attempt=running.attempts) is None
    assert QualityCheck.objects.get(pk=running.pk).state == CheckState.RUNNING


@pytest.mark.django_db
def test_a_window_that_changed_after_its_slices_is_checked_whole(fanned: Path) -> None:
    model = _traffic("sea")
    running = _sliced(model)
    send(
        model, rows(5, seed=40), start=T0 + HOUR + timedelta(minutes=50), prefix="late"
    )  # in slice 0's hours
    check = check_merge_run(check_id=running.pk, attempt=running.attempts)
    assert check is not None and check.state == CheckState.DONE and check.n_samples == 705
    single = _single(model)
    assert check.data_quality.pop("fanout") == {"slices": 3, "merged": False}
    for field in ("n_samples", "n_labelled", "metrics", "estimated", "drift", "data_quality", "segments"):
        assert getattr(check, field) == single[field], field


@pytest.mark.django_db
def test_the_merge_reads_no_label_and_one_sent_after_the_slices_waits_for_the_refresh(
    fanned: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The slices place their hours' labels on their rows; the merge puts those on the window's
    rows and reads none from the database. A label sent between the slices and the merge is not
    in the check: the labels' refresh of finished checks takes it. Late samples of the first hour
    make a part listed after the others: the window's rows are not in the slices' order."""
    from monitoring.checks import check_labels_refresh
    from monitoring.services import labels_ingest
    from monitoring.store import source

    model = _traffic("sea")
    send(model, rows(10, seed=41, shift=0.9), start=T0 + timedelta(minutes=50), prefix="late")
    single = _single(model)
    running = _sliced(model)
    labels_ingest(model=model, body={"labels": [{"id": "h0b0", "label": rows(1, seed=50)[0]["label"]}]})

    def unread(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the merge read the window's labels")

    with monkeypatch.context() as patched:
        patched.setattr(source, "labels_meanwhile", unread)
        patched.setattr(source, "window_labels", unread)
        check = check_merge_run(check_id=running.pk, attempt=running.attempts)
    assert check is not None and check.state == CheckState.DONE, check and check.error
    check.refresh_from_db()
    assert check.data_quality["fanout"] == {"slices": 3, "merged": True}
    _same_as_single(check, single)  # the labels of the slices' time
    assert check.n_labelled == single["n_labelled"] == 370
    assert check_labels_refresh(check=check) and check.n_labelled == 371


@pytest.mark.django_db
def test_a_compaction_between_the_slices_and_the_merge_reads_the_labels_there_and_merges(
    fanned: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The window's last hour compacted after the slices ran: the same samples in another part,
    so the slices' labels are not on the window's parts. The merge reads the labels itself and
    still merges the slices' measures (the rows are the same)."""
    from monitoring.store import source
    from monitoring.store.compaction import part_compact

    model = _traffic("sea")
    running = _sliced(model)
    assert part_compact(model_id=model.pk, bucket=T0 + 3 * HOUR) == 1
    read: list[object] = []
    meanwhile = source.labels_meanwhile

    def counted(*args: Any) -> Any:
        read.append(args)
        return meanwhile(*args)

    monkeypatch.setattr(source, "labels_meanwhile", counted)
    check = check_merge_run(check_id=running.pk, attempt=running.attempts)
    assert check is not None and check.state == CheckState.DONE, check and check.error
    check.refresh_from_db()
    assert len(read) == 1 and check.data_quality["fanout"] == {"slices": 3, "merged": True}
    _same_as_single(check, _single(model))


@pytest.mark.django_db
def test_a_fanned_out_regressors_labels_come_from_its_slices(
    fanned: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A regressor's labels are numbers (NaN where a row has none): the slices place them, and
    the merged check's realised metrics equal one worker's."""
    from monitoring.store import source

    rng = np.random.default_rng(5)
    model = regressor("price", rng, reference_rows=600)
    MonitoringPolicy.objects.update_or_create(model=model, defaults={"min_samples": 50, "min_labels": 20})
    for hour in range(3):
        batch = regression_rows(rng, 200, 0.3 * hour)
        send(model, batch[:120], start=T0 + hour * HOUR, prefix=f"h{hour}a", step=timedelta(seconds=9))
        send(
            model,
            batch[120:],
            start=T0 + hour * HOUR + timedelta(minutes=30),
            prefix=f"h{hour}b",
            labelled=False,
        )
    assert parts_compact_due() == 3
    single = _single(model)
    running = _sliced(model)
    monkeypatch.setattr(source, "window_labels", lambda *args: pytest.fail("the merge read the labels"))
    monkeypatch.setattr(source, "labels_meanwhile", lambda *args: pytest.fail("the merge read the labels"))
    check = check_merge_run(check_id=running.pk, attempt=running.attempts)
    assert check is not None and check.state == CheckState.DONE, check and check.error
    check.refresh_from_db()
    assert check.data_quality["fanout"] == {"slices": 2, "merged": True}
    assert check.n_labelled == single["n_labelled"] == 360 and check.metrics["mae"] is not None
    _same_as_single(check, single)


def test_a_worker_runs_the_fan_out_end_to_end(
    celery_worker: object, client_for: Callable[[str], APIClient], fanned: Path
) -> None:
    """The check asked for through the API goes to a worker (202), which fans it out; the slices'
    tasks and the merge run there; the check polled is the one a single worker makes."""
    model = _traffic("sea")
    body = {"start": WINDOW.start.isoformat(), "end": WINDOW.end.isoformat()}
    response = client_for("ingest").post("/api/v1/models/sea/checks", body, format="json")
    assert response.status_code == 202, response.content[:300]
    deadline = time.monotonic() + 120
    while True:
        connection.close()  # the worker thread commits on its own connection
        check = QualityCheck.objects.get(pk=response.json()["id"])
        if check.state not in (CheckState.QUEUED, CheckState.RUNNING) or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    assert check.state == CheckState.DONE, check.error
    assert check.data_quality["fanout"] == {"slices": 3, "merged": True}
    _same_as_single(check, _single(model))


@pytest.mark.django_db
def test_slices_scored_by_a_reference_replaced_since_are_not_merged(fanned: Path) -> None:
    """A reference uploaded between the slices and the merge (its PCA is another): checked whole."""
    from registry.services import reference_upload

    model = _traffic("sea")
    running = _sliced(model)
    reference_upload(model=model, rows=rows(500, seed=77))
    check = check_merge_run(check_id=running.pk, attempt=running.attempts)
    assert check is not None and check.state == CheckState.DONE
    assert check.data_quality.pop("fanout") == {"slices": 3, "merged": False}
    single = _single(model)
    assert check.drift == single["drift"] and check.data_quality == single["data_quality"]


@pytest.mark.django_db
def test_a_sampled_distance_of_a_fanned_out_check_is_within_its_stated_error(
    fanned: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past SAMPLE_ABOVE a distance is scored on a sample: one worker's of its rows, the merge's of
    the merged values. The scores are within their stated errors, and so the decisions the same
    wherever the score is clear of the threshold by them."""
    from workers.drift import sorts

    monkeypatch.setattr(sorts, "SAMPLE_ABOVE", 350)
    monkeypatch.setattr(sorts, "SAMPLE_SIZE", 300)
    model = _traffic("sea", reference_rows=1500)  # Wasserstein (a distance) past 1,000 reference rows
    running = _sliced(model)
    check = check_merge_run(check_id=running.pk, attempt=running.attempts)
    assert check is not None and check.state == CheckState.DONE
    single = _single(model)
    assert sum(bool(c.get("sample")) for c in single["drift"]["columns"].values()) == 2  # x1, x2
    for name, whole in single["drift"]["columns"].items():
        split = check.drift["columns"][name]
        if not whole.get("sample"):
            assert split == whole, name
            continue
        error = whole["sample"]["error"] + split["sample"]["error"]
        assert split["sample"]["rows"] == whole["sample"]["rows"] == 300
        assert abs(split["score"] - whole["score"]) <= 3 * error, name
        if abs(whole["score"] - whole["threshold"]) > 3 * error:
            assert split["drifted"] == whole["drifted"], name
    assert "sample" not in check.drift["multivariate"]  # every row's error, summed by the slices
    assert check.metrics == single["metrics"]


@pytest.mark.django_db
def test_slice_files_of_no_running_check_are_collected_after_the_grace(fanned: Path, settings: Any) -> None:
    """A check given up (or deleted) before its merge leaves its slices' files: the part collector
    deletes them once past the grace, and keeps a running check's."""
    from django.utils import timezone

    from monitoring.store.collect import parts_collect

    model = _traffic("sea")
    running = _sliced(model)
    files = list(CheckSlice.objects.filter(quality_check=running).values_list("result", flat=True))
    assert len(files) == 3 and all(default_storage.exists(name) for name in files)
    later = timezone.now() + timedelta(seconds=settings.DRIFTWATCH_PART_GRACE_SECONDS + 60)
    parts_collect(now=later)  # the compacted hours' retired parts go
    assert all(default_storage.exists(name) for name in files)  # its check is running: kept
    QualityCheck.objects.filter(pk=running.pk).update(state=CheckState.FAILED)
    assert parts_collect(now=timezone.now()) == 0  # within the grace
    assert parts_collect(now=later) == 3 and not any(default_storage.exists(name) for name in files)


@pytest.mark.django_db
def test_a_window_past_the_payloads_retention_is_not_fanned_out(fanned: Path) -> None:
    model = _traffic("sea")
    MonitoringPolicy.objects.filter(model=model).update(payload_retention_days=1)
    check = quality_check_run(model_id=model.pk, window=WINDOW)
    assert check is not None and check.state == CheckState.DONE and check.n_samples == 700
    assert "fanout" not in check.data_quality and "retention" in check.data_quality
    assert not CheckSlice.objects.exists()
