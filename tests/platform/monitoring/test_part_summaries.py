"""Per-hour summaries (``monitoring.store.summaries``): a compacted hour carries its categorical
features' counts, and a check over whole hours takes their tests from the merged counts. The
check equals the one made from the columns read whole, byte for byte (evidently parity holds
because the counts, in their order, are the same); a window that is not whole summarised hours
reads the columns; retention keeps the counts."""

from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pandas as pd
import pytest

from monitoring.models import MonitoringPolicy, SamplePart
from monitoring.store.compaction import parts_compact_due
from monitoring.store.retention import payloads_expire
from monitoring.window import Window, window_load
from registry.models import RegisteredModel
from registry.services import model_register, reference_upload
from tests.clock import NOW, T0
from tests.platform.monitoring.factories import check_with_segments, rows, send
from workers.drift import sorts
from workers.drift.summary import category_counts

pytestmark = pytest.mark.django_db
HOUR = timedelta(hours=1)


def _data(n: int, *, seed: int, shift: float = 0.0) -> list[dict[str, Any]]:
    """The factories' rows with a second category of many values: some the reference never saw
    (out of schema, more of them when shifted), some missing."""
    rng = np.random.default_rng(seed + 11)
    out = rows(n, seed=seed, shift=shift)
    for i, r in enumerate(out):
        k = int(rng.zipf(1.6 if shift else 1.9)) % (40 if shift else 25)
        r["features"]["city"] = None if i % 23 == 0 else f"c{k}"
    return out


def _model() -> RegisteredModel:
    model = model_register(
        data={
            "name": "summaries",
            "task": "classification",
            "classes": [0, 1],
            "features": [
                {"name": "x1", "type": "numerical"},
                {"name": "x2", "type": "numerical"},
                {"name": "segment", "type": "categorical"},
                {"name": "city", "type": "categorical"},
            ],
        }
    )
    reference_upload(model=model, rows=[r for r in _data(1500, seed=1) if r["features"]["city"] is not None])
    MonitoringPolicy.objects.update_or_create(
        model=model,
        defaults={
            "window_kind": "hours",
            "window_size": 3,
            "min_samples": 50,
            "min_labels": 50,
            "cooldown_minutes": 0,
            "segments": [{"feature": "segment"}, {"feature": "x1", "bins": [0.0]}],
        },
    )
    return model


def _traffic(model: RegisteredModel) -> None:
    """Three hours, each sent in several requests (one resent whole: its part holds duplicates),
    the last hour shifted; then the hours are compacted."""
    for hour in range(3):
        data = _data(420, seed=10 + hour, shift=0.8 if hour == 2 else 0.0)
        for k, lo in enumerate(range(0, 420, 140)):
            start = T0 + hour * HOUR + timedelta(seconds=8 * lo)
            send(model, data[lo : lo + 140], start=start, prefix=f"h{hour}-{k}-", step=timedelta(seconds=8))
        send(model, data[:140], start=T0 + hour * HOUR, prefix=f"h{hour}-0-", step=timedelta(seconds=8))
    assert parts_compact_due() == 3


def _result(model: RegisteredModel, window: Window) -> bytes:
    return orjson.dumps(check_with_segments(model, window), option=orjson.OPT_SERIALIZE_NUMPY)


def _load(model: RegisteredModel, *, counted: bool, **bounds: Any) -> Window:
    bounds = bounds or {"start": T0, "end": T0 + 3 * HOUR}
    return window_load(model=model, counted=counted, **bounds)


@pytest.mark.parametrize("sampled", [False, True], ids=["whole", "pca-sampled"])
def test_a_check_over_whole_hours_from_the_summaries_equals_the_check_on_the_columns(
    columnar: Path, monkeypatch: pytest.MonkeyPatch, sampled: bool
) -> None:
    """Quality (missing and out-of-schema shares, the first out-of-schema examples in row order),
    drift (chi-square or Jensen-Shannon), the drill-downs, the PCA and every segment: the same."""
    if sampled:  # 1,260 rows past SAMPLE_ABOVE: the PCA reads a sample of rows, each column's as it goes
        monkeypatch.setattr(sorts, "SAMPLE_ABOVE", 1000)
        monkeypatch.setattr(sorts, "SAMPLE_SIZE", 700)
    model = _model()
    _traffic(model)
    counted, read = _load(model, counted=True), _load(model, counted=False)
    assert sorted(counted.counts) == ["city", "segment"] and read.counts == {}
    assert "city" not in counted.frame.columns and counted.has("city")  # deferred: read if asked for
    for name in ("city", "segment"):
        column = read.frame[name]
        assert list(counted.counts[name].counts.items()) == list(category_counts(column).items())
        assert counted.counts[name].missing == int(column.isna().sum())
    assert counted.counts["city"].missing > 0
    found = _result(model, counted)
    assert found == _result(model, read)
    quality = orjson.loads(found)["result"]["data_quality"]["columns"]["city"]
    assert quality["out_of_schema_count"] > 0 and len(quality["out_of_schema_examples"]) == 5


def test_a_window_not_made_of_whole_summarised_hours_reads_its_columns(columnar: Path) -> None:
    model = _model()
    _traffic(model)
    assert _load(model, counted=True, start=T0, end=T0 + 2 * HOUR).counts  # whole hours: counted
    assert _load(model, counted=True, start=None, end=T0 + 3 * HOUR).counts  # all before a whole hour
    # A bound inside an hour, the last_n newest, an hour not compacted yet: read.
    assert _load(model, counted=True, start=T0 + timedelta(minutes=30), end=T0 + 3 * HOUR).counts == {}
    assert _load(model, counted=True, start=T0, end=T0 + timedelta(hours=2, minutes=59)).counts == {}
    assert _load(model, counted=True, start=None, end=T0 + 3 * HOUR, last_n=500).counts == {}
    send(model, _data(30, seed=99), start=T0 + 3 * HOUR, prefix="late-")  # a request's part: no summary
    assert _load(model, counted=True, start=T0, end=T0 + 4 * HOUR).counts == {}
    assert parts_compact_due() == 0  # a lone clean part: nothing to merge, summarised in place
    window = _load(model, counted=True, start=T0, end=T0 + 4 * HOUR)
    assert window.counts["segment"].missing == 0 and sum(window.counts["segment"].counts.values()) == 1290
    # A part's summary that is not of its rows (another format, a wrong count) is not used.
    part = SamplePart.objects.filter(model=model, retired_at__isnull=True).first()
    assert part is not None and part.summary is not None
    SamplePart.objects.filter(pk=part.pk).update(summary={**part.summary, "rows": part.rows + 1})
    assert _load(model, counted=True, start=T0, end=T0 + 4 * HOUR).counts == {}


def test_counts_merge_in_the_windows_part_order_equal_counting_the_column() -> None:
    """Keys first seen in a later part come after the earlier parts' keys, as in the column."""
    from workers.drift.summary import ColumnCounts, counts_merge

    parts = [pd.Series(["b", None, "a", "b"]), pd.Series(["c", "a", None, None]), pd.Series(["d", "c"])]
    merged = counts_merge([ColumnCounts(category_counts(p), int(p.isna().sum())) for p in parts])
    whole = pd.concat(parts, ignore_index=True)
    expected = [("b", 2), ("a", 2), ("c", 2), ("d", 1)]
    assert list(merged.counts.items()) == list(category_counts(whole).items()) == expected
    assert merged.missing == 3


def test_retention_keeps_the_summaries_and_the_hours_counts(columnar: Path) -> None:
    model = _model()
    _traffic(model)
    before = _load(model, counted=True).counts
    MonitoringPolicy.objects.filter(model=model).update(payload_retention_days=1)
    assert payloads_expire(now=NOW) == 3
    live = SamplePart.objects.filter(model=model, retired_at__isnull=True)
    assert all(p.payload_dropped and p.summary is not None for p in live)
    assert _load(model, counted=True).counts == before


def test_a_check_past_retention_runs_the_categorical_tests_from_the_summaries(columnar: Path) -> None:
    """The hours' features are gone; their counts are not: the check over those whole hours runs
    the categorical features' drift and quality (the same as before retention) and says so."""
    from monitoring.checks import quality_check_run
    from monitoring.models import QualityCheck
    from monitoring.window import range_window

    model = _model()
    _traffic(model)
    window = range_window(T0, T0 + 3 * HOUR)
    before = QualityCheck.objects.get(pk=quality_check_run(model_id=model.pk, window=window).pk)
    QualityCheck.objects.all().delete()
    MonitoringPolicy.objects.filter(model=model).update(payload_retention_days=1)
    assert payloads_expire(now=NOW) == 3
    after = QualityCheck.objects.get(pk=quality_check_run(model_id=model.pk, window=window).pk)
    assert after.data_quality["retention"]["from_summaries"] == ["city", "segment"]
    assert sorted(after.drift["columns"]) == ["city", "segment"] and "multivariate" not in after.drift
    for name in ("city", "segment"):
        assert after.drift["columns"][name] == before.drift["columns"][name]
        assert after.data_quality["columns"][name] == before.data_quality["columns"][name]
    assert after.drift["columns"]["city"]["drifted"]  # the shifted last hour


def test_a_window_bounded_in_another_time_zone_reads_and_counts_its_utc_hours(columnar: Path) -> None:
    """Parts are UTC hours: a bound at +05:30 is placed on them by its instant (14:10+05:30 is
    08:40 UTC, in the part of 08:00 UTC; 13:30+05:30 is 08:00 UTC, a whole hour)."""
    from datetime import timezone as tz

    model = _model()
    _traffic(model)
    india = tz(timedelta(hours=5, minutes=30))
    inside = (T0 + timedelta(minutes=40)).astimezone(india)
    cut = _load(model, counted=True, start=inside, end=T0 + HOUR)
    whole = _load(model, counted=False, start=T0, end=T0 + HOUR)
    assert len(cut.frame) == int((whole.frame["timestamp"] >= inside).sum()) > 0 and cut.counts == {}
    shifted = _load(model, counted=True, start=T0.astimezone(india), end=(T0 + HOUR).astimezone(india))
    assert len(shifted.frame) == len(whole.frame) == 420 and sorted(shifted.counts) == ["city", "segment"]


def test_a_feature_of_too_many_or_too_long_values_is_not_summarised(
    columnar: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from monitoring.store import summaries

    monkeypatch.setattr(summaries, "MAX_KEY_CHARS", 20)  # "a", "b", "c" fit; c0…c39 do not
    model = _model()
    _traffic(model)
    parts = SamplePart.objects.filter(model=model, retired_at__isnull=True)
    assert all(sorted(p.summary["columns"]) == ["segment"] for p in parts)
    window = _load(model, counted=True)
    assert sorted(window.counts) == ["segment"] and "city" in window.frame.columns  # read, not deferred


def test_lone_parts_are_summarised_a_batch_a_run_and_an_unreadable_hour_is_passed_over(
    columnar: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An upgraded install's lone clean parts get their summaries a batch per compaction run; an
    hour whose file cannot be read is logged and left, and the others are summarised or compacted."""
    from django.core.files.storage import default_storage

    from monitoring.store import compaction

    model = _model()
    for hour in range(3):  # one request per hour: a lone clean part each
        send(model, _data(40, seed=50 + hour), start=T0 + hour * HOUR, prefix=f"lone{hour}-")
    lone = list(SamplePart.objects.filter(model=model).order_by("bucket"))
    assert len(lone) == 3 and all(p.summary is None for p in lone)
    default_storage.delete(lone[0].name)  # its file is gone
    monkeypatch.setattr(compaction, "SUMMARISE_PER_RUN", 2)
    assert parts_compact_due() == 0
    summarised = {p.pk for p in SamplePart.objects.filter(model=model, summary__isnull=False)}
    assert summarised == {lone[1].pk}  # two tried: the unreadable one and the next
    assert parts_compact_due() == 0
    summarised = {p.pk for p in SamplePart.objects.filter(model=model, summary__isnull=False)}
    assert summarised == {lone[1].pk, lone[2].pk}
    # An hour of two parts, one file gone: not compacted, and the next hour still is.
    for hour in (5, 6):
        send(model, _data(10, seed=hour), start=T0 + hour * HOUR, prefix=f"a{hour}-")
        send(
            model,
            _data(10, seed=hour + 9),
            start=T0 + hour * HOUR + timedelta(minutes=30),
            prefix=f"b{hour}-",
        )
    default_storage.delete(SamplePart.objects.filter(model=model, bucket=T0 + 5 * HOUR).first().name)  # type: ignore[union-attr]
    assert parts_compact_due() == 1
    assert (
        SamplePart.objects.filter(model=model, bucket=T0 + 6 * HOUR, retired_at__isnull=True).get().compacted
    )
