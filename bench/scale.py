"""Scale benchmark of the columnar sample store (issue 21), PostgreSQL + the local storage.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/driftwatch nice -n 10 python bench/scale.py \
        [--samples 1000000] [--categorical-samples 1000000] [--embedding-samples 100000] [--dim 768]

Uses (and empties) its own database `<name>_scale` and a temporary media folder. Prints, in one
run:
- ingestion through ``predictions_ingest`` (10,000-sample batches, one client in-process) of a
  window of N samples × 20 numerical features, half labelled: samples/s, and bytes per sample
  (parts on storage; the PostgreSQL index table with its indexes) beside the float32 payload;
- the compaction of its hours into one part each (the beat task's, as on a live install);
- a check (``quality_check_run``) of that window end to end, its load stage (the columnar
  source: parts + labels) and the rest (the check's computation), each beside the floor: the
  engine (pyarrow, memory-mapped Arrow IPC) scanning the same columns of the same parts into
  numpy (its best of three scans), printed as a ratio; each stage of that check (its functions
  in monitoring.checks, wrapped with a timer here) beside the floor; the targets as MET / NOT
  MET; the check's peak memory, run again in a fresh process (a worker's anonymous resident
  memory, sampled);
- a raw COPY of the same rows into the JSON table of before the columnar store, and ingestion's ratio to it;
- with ``--fanout-slices K``, that check fanned out over K slices of its hours (each slice's and
  the merge's time, run one after another here, and the wall time K workers would take);
- 20 categorical features (``--categorical-samples``, 0: skipped): a check over whole hours from
  the hours' summaries (per-value counts written at compaction) against the same check reading
  the columns, alternately in one process, with their results compared;
- one 768-dim embedding: bytes per sample beside the float32 payload, and a window of M samples
  read into arrays (the source, then stacked into an (M, 768) float32 matrix), beside the floor;
- with ``--regression-samples N``, a regressor's window of N samples × 20 numerical checked in
  a fresh process, alternately: DLE's trees on a sample of SAMPLE_SIZE rows (past SAMPLE_ABOVE,
  as a check runs), on every row read a block of rows at a time, and on every row read whole
  (the code before): each way's peak memory and time, and the estimates (the sample's error);
- with /work/venvs/<name>-peers holding duckdb (``python3.11 -m venv V && V/bin/pip install
  duckdb==1.4.1 pyarrow==26.0.1 numpy``; set DRIFTWATCH_PEERS_PYTHON=V/bin/python), DuckDB's
  scan of the same columns from a Parquet copy of the parts, as a second engine's floor.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _pg import bench_database_url, copy_samples_seconds, django_on, drop_database  # noqa: E402
from _proc import with_peak  # noqa: E402

BATCH = 10_000
N_FEATURES = 20
N_CATEGORIES = 12
HOUR = timedelta(hours=1)


def _samples(prefix: str, start: int, n: int, t0: datetime, step_s: float, rng: Any) -> list[dict[str, Any]]:
    x = rng.normal(size=(n, N_FEATURES)).round(6)
    p1 = rng.random(n).round(4)
    out = []
    for i in range(n):
        row = x[i].tolist()
        out.append(
            {
                "id": f"{prefix}{start + i}",
                "timestamp": (t0 + timedelta(seconds=(start + i) * step_s)).isoformat(),
                "features": {f"x{j}": row[j] for j in range(N_FEATURES)},
                "prediction": int(p1[i] > 0.5),
                "probabilities": {"0": float(1 - p1[i]), "1": float(p1[i])},
            }
        )
    return out


def _table_bytes(table: str) -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_total_relation_size(%s)", [table])
        return int(cursor.fetchone()[0])


FLOOR_RUNS = 3
FIRST_SCAN: list[float] = []  # each floor's first scan, printed beside the best


def _floor_scan(model: Any, columns: list[str], start: datetime, end: datetime) -> tuple[float, int]:
    """The engine alone, at its best of FLOOR_RUNS scans (the first one pays for the page cache
    and the process's first touch of that much memory, which a check run after it does not):
    the window's parts, these columns, into numpy (no labels, no masks)."""
    runs = [_floor_scan_once(model, columns, start, end) for _ in range(FLOOR_RUNS)]
    FIRST_SCAN.append(runs[0][0])
    return min(seconds for seconds, _ in runs), runs[0][1]


def _floor_scan_once(model: Any, columns: list[str], start: datetime, end: datetime) -> tuple[float, int]:
    import pyarrow as pa
    import pyarrow.compute as pc

    from monitoring.models import SamplePart
    from monitoring.store.parts import part_read

    names = list(
        SamplePart.objects.filter(model=model, retired_at__isnull=True).values_list("name", flat=True)
    )
    t = time.perf_counter()
    n = 0
    for name in names:
        table = part_read(name, ["timestamp", *columns])
        ts = table.column("timestamp")
        table = table.filter(
            pc.and_(pc.greater_equal(ts, pa.scalar(start, ts.type)), pc.less(ts, pa.scalar(end, ts.type)))
        )
        for c in columns:
            col = table.column(c).combine_chunks()
            _ = (
                col.values.to_numpy()
                if pa.types.is_fixed_size_list(col.type)
                else col.to_numpy(zero_copy_only=False)
            )
        n += len(table)
    return time.perf_counter() - t, n


def _lower_bound(model: Any, start: datetime, end: datetime, floor_s: float) -> tuple[float, float, str]:
    """The least time any check of this window can take on this machine, given what the issue
    keeps: the labels relational (read from PostgreSQL) and the drift tests exact (each numerical
    column sorted; a sample of it past ``SAMPLE_ABOVE``, as a check sorts it). It adds four
    works' CPU seconds and spreads them over this process's cores, with no overhead and nothing
    else computed: the floor's scan, the window's labels read alone on one connection
    (PostgreSQL's statement and this process's decoding, one after the other: its wall time),
    the labels' placement on the rows by sample id (their CPU time), and the columns' sorts alone
    (one after another: their CPU time). Each is its best of FLOOR_RUNS. Left out, so the bound
    is low: the realised metrics, the PCA, data quality, the tests' own passes and the check's
    rows."""
    import pyarrow as pa

    from monitoring.store.parts import part_read
    from monitoring.store.source import _hours_since_epoch, _placed, window_labels, window_parts
    from workers.drift.sorts import shared_sorts

    parts = window_parts(model, start, end)

    label_runs = []
    for _ in range(FLOOR_RUNS):
        t = time.perf_counter()
        found = window_labels(model, start, end, parts)
        label_runs.append(time.perf_counter() - t)
    labels_s = min(label_runs)
    # The labels put on the window's rows by sample id (their only key in a relational table).
    tables = [part_read(p.name, ["sample_id"]) for p in parts]
    ids = pa.concat_tables(tables)
    read = [(p.id, len(t)) for p, t in zip(parts, tables, strict=True)]
    hours = [(_hours_since_epoch(p.bucket), len(t)) for p, t in zip(parts, tables, strict=True)]
    place_runs = []
    for _ in range(FLOOR_RUNS):
        t = time.process_time()  # every thread of this process (the placement runs an hour a thread)
        _placed(model, ids, read, hours, found)
        place_runs.append(time.process_time() - t)
    place_cpu = min(place_runs)
    with shared_sorts():
        sorts_cpu = _sorts_cpu(parts)
    cores = len(os.sched_getaffinity(0))
    bound = (floor_s + labels_s + place_cpu + sorts_cpu) / cores
    line = (
        f"lower bound of any check of this window here (labels relational, drift tests exact; nothing "
        f"else computed): (scan {floor_s:.3f} + labels alone {labels_s:.3f} + their placement {place_cpu:.3f} "
        f"+ {N_FEATURES} columns' sorts "
        f"{sorts_cpu:.3f} CPU s) / {cores} cores = {bound:.3f} s = {bound / floor_s:.1f}× the floor; "
        f"the sorts alone (the drift test's least work) {sorts_cpu / floor_s:.1f}× the scan"
    )
    return bound, sorts_cpu, line


def _sorts_cpu(parts: list[Any]) -> float:
    """The CPU seconds of each numerical column's sort as a check's drift tests sort it (its best
    of FLOOR_RUNS), summed; inside ``shared_sorts()``."""
    import pandas as pd
    import pyarrow as pa

    from monitoring.store.parts import part_read
    from workers.drift.sorts import release_sorted, sorted_sample

    sorts_cpu = 0.0
    for j in range(N_FEATURES):  # a column at a time: at 10M, 20 columns held at once are 1.6 GB
        column = pa.concat_arrays(
            [c for p in parts for c in part_read(p.name, [f"feature:x{j}"]).column(0).chunks]
        )
        series = pd.Series(column.to_numpy(zero_copy_only=False), copy=False)
        runs = []
        for _ in range(FLOOR_RUNS):
            t = time.process_time()
            sorted_sample(series)
            runs.append(time.process_time() - t)
            # The next run sorts again (a sample's positions are kept: one draw a check).
            release_sorted(series)
        sorts_cpu += min(runs)
    return sorts_cpu


def _duckdb_floor(model: Any, columns: list[str], media: Path) -> str:
    peers = os.environ.get("DRIFTWATCH_PEERS_PYTHON")
    if not peers or not Path(peers).exists():
        return "duckdb: skipped (set DRIFTWATCH_PEERS_PYTHON to a venv's python with duckdb)"
    import pyarrow.parquet as pq

    from monitoring.models import SamplePart
    from monitoring.store.parts import part_read

    folder = Path(tempfile.mkdtemp(dir=media))
    for k, name in enumerate(
        SamplePart.objects.filter(model=model, retired_at__isnull=True).values_list("name", flat=True)
    ):
        pq.write_table(part_read(name, columns), folder / f"{k}.parquet", compression="snappy")
    select = ", ".join(f'"{c}"' for c in columns)
    sql = f"SELECT {select} FROM read_parquet('{folder}/*.parquet')"
    script = (
        "import duckdb, json, sys, time\n"
        "con = duckdb.connect(); t = time.perf_counter()\n"
        "tab = con.execute(sys.argv[1]).fetch_arrow_table()\n"
        "print(json.dumps({'s': time.perf_counter() - t, 'rows': tab.num_rows}))\n"
    )
    run = subprocess.run([peers, "-c", script, sql], capture_output=True, text=True, check=True)
    out = json.loads(run.stdout.strip().splitlines()[-1])
    return (
        f"duckdb (Parquet copy of the parts, same columns → Arrow): {out['s']:.3f} s for {out['rows']:,} rows"
    )


def _categorical_samples(
    prefix: str, start: int, n: int, t0: datetime, step_s: float, rng: Any
) -> list[dict[str, Any]]:
    """``_samples`` with N_FEATURES categorical features of N_CATEGORIES values (skewed)."""
    codes = rng.zipf(1.8, size=(n, N_FEATURES)) % N_CATEGORIES
    p1 = rng.random(n).round(4)
    return [
        {
            "id": f"{prefix}{start + i}",
            "timestamp": (t0 + timedelta(seconds=(start + i) * step_s)).isoformat(),
            "features": {f"c{j}": f"v{codes[i, j]}" for j in range(N_FEATURES)},
            "prediction": int(p1[i] > 0.5),
            "probabilities": {"0": float(1 - p1[i]), "1": float(p1[i])},
        }
        for i in range(n)
    ]


def _ingest(
    model: Any, n: int, t0: datetime, step_s: float, label_share: float, samples: Any = _samples
) -> tuple[float, float]:
    from monitoring.services import labels_ingest, predictions_ingest

    rng = np.random.default_rng(0)
    spent = 0.0
    for start in range(0, n, BATCH):
        batch = samples("s", start, min(BATCH, n - start), t0, step_s, rng)
        t = time.perf_counter()
        result = predictions_ingest(model=model, body={"samples": batch})
        spent += time.perf_counter() - t
        assert result.accepted == len(batch), result
    # As autovacuum would by now (it is off on this machine): without statistics the labels'
    # prediction lookups of 10M samples ran at 440 labels/s instead of ~8,000.
    _analyze()
    t = time.perf_counter()
    labelled = int(n * label_share)
    for start in range(0, labelled, BATCH):
        ids = range(start, min(start + BATCH, labelled))
        labels_ingest(
            model=model, body={"labels": [{"id": f"s{i}", "label": int(rng.random() > 0.5)} for i in ids]}
        )
    return spent, time.perf_counter() - t


def _analyze() -> None:
    """The planner's statistics after the bulk load, as autovacuum's analyze gives a live install
    within a minute: on a table it still believes empty, the labels join is a nested loop of
    1,000,000 index probes (3.3 s) instead of a hash join (1.0 s)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("ANALYZE monitoring_predictionsample")
        cursor.execute("ANALYZE monitoring_groundtruth")
        cursor.execute("ANALYZE monitoring_detectorbacklog")


def _detector_restart(model: Any) -> None:
    """--reuse: the detector starts over with every label waiting again, queued as ingestion
    queues a new label (with its known time and error), so that detector_feed measures the first
    feed of all of them, as in a run with ingestion (queued in one go, they fill batches of up to
    BATCH_LABELS; ingestion's 10,000-label requests make more, smaller ones: 0.15 s to feed in a
    fresh 1M run against 0.13-0.18 s here)."""
    from django.db import connection, transaction

    from monitoring.models import BacklogBatch, DetectorBacklog, GroundTruth, SequentialDetector
    from monitoring.sequential import NewLabel, backlog_queue, label_predictions

    labels = [
        NewLabel(*row)
        for row in GroundTruth.objects.filter(model=model).values_list(
            "pk", "sample_id", "label", "received_at", "labelled_at"
        )
    ]
    predictions = label_predictions(model=model, sample_ids=[label.sample_id for label in labels])
    with transaction.atomic():
        SequentialDetector.objects.filter(model=model).delete()
        DetectorBacklog.objects.filter(model=model).delete()
        BacklogBatch.objects.filter(model=model).delete()
        backlog_queue(model=model, labels=labels, predictions=predictions)
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE monitoring_detectorbacklog")
        cursor.execute("VACUUM ANALYZE monitoring_backlogbatch")


def _compact(model: Any, end: datetime) -> None:
    """Merge each closed hour's parts into one, as the beat task does on a live install once
    DRIFTWATCH_COMPACT_AFTER_SECONDS have passed (a no-op for a --reuse window compacted before)."""
    from django.conf import settings

    from monitoring.models import SamplePart
    from monitoring.store.compaction import parts_compact_due

    live = SamplePart.objects.filter(model=model, retired_at__isnull=True)
    before = live.count()
    t = time.perf_counter()
    hours = parts_compact_due(now=end + HOUR + timedelta(seconds=settings.DRIFTWATCH_COMPACT_AFTER_SECONDS))
    print(
        f"compaction (the beat task's): {hours} hour(s), {before} live parts -> {live.count()} "
        f"in {time.perf_counter() - t:.1f} s"
    )
    if hours:
        _vacuum()


def _vacuum() -> None:
    """Free the space of the index rows compaction repointed (an UPDATE leaves the old row
    versions) and refresh the planner's statistics, as autovacuum would (off on this machine)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE monitoring_predictionsample")


def _tabular_schema(name: str) -> dict[str, Any]:
    """The bench's tabular model: a binary classifier on N_FEATURES numerical features."""
    return {
        "name": name,
        "task": "classification",
        "classes": [0, 1],
        "features": [{"name": f"x{j}", "type": "numerical"} for j in range(N_FEATURES)],
    }


def _tabular_ingest(n: int) -> tuple[Any, datetime, datetime, float]:
    from django.utils import timezone

    from monitoring.models import MonitoringPolicy
    from registry.services import model_register, reference_upload

    model = model_register(data=_tabular_schema(f"scale-{n}"))
    ref = _samples("r", 0, 5000, timezone.now(), 0, np.random.default_rng(1))
    reference_upload(
        model=model,
        rows=[
            {
                "features": r["features"],
                "label": r["prediction"],
                "prediction": r["prediction"],
                "probabilities": r["probabilities"],
            }
            for r in ref
        ],
    )
    MonitoringPolicy.objects.update_or_create(model=model, defaults={"min_samples": 100, "min_labels": 50})
    end = timezone.now().replace(minute=0, second=0, microsecond=0) - HOUR
    start = end - 24 * HOUR
    step = (end - start).total_seconds() / n
    ingest_s, label_s = _ingest(model, n, start, step, 0.5)
    _analyze()
    print(
        f"ingest: {n:,} samples × {N_FEATURES} numerical in {ingest_s:.1f} s = {n / ingest_s:,.0f} samples/s "
        f"(one in-process client, {BATCH:,}-sample batches); labels for half in {label_s:.1f} s"
    )
    return model, start, end, n / ingest_s


# The check's stages, as monitoring.checks calls them (wrapped here, in the bench only, to time
# each one inside a real check run).
# The per-feature stages (column_* and descriptor_drift, and the reads of a window's deferred
# features, ``Window.feature``) run a column per thread inside ``_features_measure``: their totals
# are summed over the threads, so they may add up to more than its wall time.
STAGES = (
    "window_load",
    "reference_state",
    "_realised",
    "_estimate",
    "_features_measure",
    "Window.feature",
    "column_quality",
    "column_drift",
    "descriptor_drift",
    "column_distribution",
    "multivariate_drift",
    "data_drift",  # the prediction's
    "_distributions",  # the prediction's
    "decisions_make",
    "segments_compute",
    "_store_distributions",
    "alerts_evaluate",
    "detector_feed",  # the sequential detector: every label not fed yet (the first check: all of them)
)


def _timed_stages() -> tuple[dict[str, float], Any]:
    """Wraps each stage of monitoring.checks with a timer; returns the totals and an undo."""
    import monitoring.checks as checks

    spent: dict[str, float] = dict.fromkeys(STAGES, 0.0)
    originals = {name: getattr(checks, name) for name in STAGES if "." not in name}
    from monitoring.window import Window

    feature = Window.feature

    def timed(name: str, f: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            t = time.perf_counter()
            try:
                return f(*args, **kwargs)
            finally:
                spent[name] += time.perf_counter() - t

        return wrapper

    for name, f in originals.items():
        setattr(checks, name, timed(name, f))
    setattr(Window, "feature", timed("Window.feature", feature))  # noqa: B010

    def undo() -> None:
        for name, f in originals.items():
            setattr(checks, name, f)
        setattr(Window, "feature", feature)  # noqa: B010

    return spent, undo


def _check_peak(url: str, model: Any, start: datetime, end: datetime) -> tuple[float, float]:
    """Peak memory of the check as a worker holds it, in GiB: a fresh process (as a worker is)
    imports what a check worker imports and loads the reference, then the check runs there, its
    labels all new again, while a thread samples the process's anonymous resident memory every
    10 ms → (before the check, peak during it). Anonymous memory is what numpy, Python and
    Arrow's pool allocate; the parts' memory-mapped pages are the page cache's, not counted.
    (tracemalloc plus Arrow's pool counted 1.4 GiB at 10M where the process peaked at 4.0.)"""
    import multiprocessing

    from monitoring.models import QualityCheck

    QualityCheck.objects.filter(model=model).delete()
    _detector_restart(model)
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        before, peak = pool.apply(_peak_child, (url, model.pk, start, end))
    return before / 2**20, peak / 2**20


def _peak_child(url: str, model_id: int, start: datetime, end: datetime) -> tuple[int, int]:
    """In the fresh process: (anonymous memory before the check, its peak during it), in KiB."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _pg import django_on

    django_on(url)
    import workers.tasks.monitoring  # noqa: F401  # what a check worker imports at its start
    from monitoring.checks import quality_check_run
    from monitoring.reference import reference_state
    from monitoring.window import range_window
    from registry.models import RegisteredModel

    reference_state(model=RegisteredModel.objects.get(pk=model_id))  # a worker's cache, warm
    before, peak, _, _ = with_peak(
        lambda: quality_check_run(model_id=model_id, window=range_window(start, end))
    )
    return before, peak


def _copy_rate(n: int) -> float:
    """A raw COPY of the same rows (20 numerical features, a prediction, 2 probabilities) into
    the JSON table of before the columnar store, as JSON documents, under another model: samples/s."""
    from registry.services import model_register

    model = model_register(data=_tabular_schema(f"scale-copy-{n}"))
    rng = np.random.default_rng(0)
    t0 = datetime.now(UTC) - 24 * HOUR
    samples = [
        s
        for start in range(0, n, BATCH)
        for s in _samples("c", start, min(BATCH, n - start), t0, 86_400 / n, rng)
    ]
    rate = n / copy_samples_seconds(model.pk, samples)
    model.delete()
    return rate


def _verdict(ok: bool) -> str:
    return "MET" if ok else "NOT MET"


def tabular(n: int, media: Path, url: str) -> None:
    import workers.tasks.monitoring  # noqa: F401  # what a check worker imports at its start
    from monitoring.checks import quality_check_run
    from monitoring.models import PredictionSample, QualityCheck, SamplePart
    from monitoring.samples import WindowBounds, sample_source
    from monitoring.window import range_window
    from registry.models import RegisteredModel

    model = RegisteredModel.objects.filter(name=f"scale-{n}").first()
    if model is not None:  # --reuse: the earlier run's window
        start = PredictionSample.objects.filter(model=model).order_by("timestamp").first().timestamp  # type: ignore[union-attr]
        end = start + 24 * HOUR
        QualityCheck.objects.filter(model=model).delete()  # else the same window's check is returned
        _detector_restart(model)
        print("ingest: skipped (--reuse)")
        ingest_rate = None
    else:
        model, start, end, ingest_rate = _tabular_ingest(n)
    # The index's size as ingested: compaction's repointing leaves old row versions whose space a
    # live table reuses (VACUUM frees it for reuse; the file keeps its size).
    index = _table_bytes("monitoring_predictionsample") / PredictionSample.objects.count()
    _compact(model, end)
    parts = sum(
        SamplePart.objects.filter(model=model, retired_at__isnull=True).values_list("size", flat=True)
    )
    print(
        f"bytes/sample, 20 numerical: parts {parts / n:.0f} (float64 values + id + time + prediction + 2 probabilities), "
        f"index table+indexes {index:.0f}; float32 payload {N_FEATURES * 4}: parts {parts / n / (N_FEATURES * 4):.2f}×, "
        f"parts+index {(parts / n + index) / (N_FEATURES * 4):.2f}×"
    )
    columns = [f"feature:x{j}" for j in range(N_FEATURES)] + ["prediction", "proba:0", "proba:1", "sample_id"]
    floor_s, floor_n = _floor_scan(model, columns, start, end)
    t = time.perf_counter()
    loaded = sample_source().load(model=model, window=WindowBounds(start, end))
    load_s = time.perf_counter() - t
    assert len(loaded) == n == floor_n, (len(loaded), n, floor_n)
    del loaded
    spent, undo = _timed_stages()
    t = time.perf_counter()
    check = quality_check_run(model_id=model.pk, window=range_window(start, end))
    check_s = time.perf_counter() - t
    undo()
    assert check is not None and check.n_samples == n, check and (check.state, check.error, check.n_samples)
    print(
        f"floor: pyarrow scan of the window's {len(columns)} columns from its parts: {floor_s:.3f} s ({floor_n:,} rows; "
        f"best of {FLOOR_RUNS}, the first {FIRST_SCAN[-1]:.3f} s)"
    )
    print(
        f"load (columnar source: parts + labels by range, typed arrays): {load_s:.3f} s = {load_s / floor_s:.1f}× the floor"
    )
    print(
        f"check end to end: {check_s:.2f} s = {check_s / floor_s:.1f}× the floor; "
        f"of it the check's computation ≈ {check_s - load_s:.2f} s; n_labelled {check.n_labelled:,}; state {check.state}"
    )
    print(f"stages of that check (each stage's total time; ratio to the floor scan {floor_s:.3f} s):")
    for name in STAGES:
        print(f"  {name:22} {spent[name]:7.3f} s  {spent[name] / floor_s:6.1f}×")
    tests = (
        "column_quality",
        "column_drift",
        "descriptor_drift",
        "column_distribution",
        "multivariate_drift",
        "data_drift",
        "_distributions",
        "_estimate",
    )
    worst = max(tests, key=lambda k: spent[k])
    limit = {1_000_000: 2.0, 10_000_000: 15.0}.get(n)
    print(
        f"targets at {n:,}: check {check_s:.2f} s"
        + (
            f" ≤ {limit:.0f} s → {_verdict(check_s <= limit)}"
            if limit
            else " (targets are set at 1M and 10M)"
        )
        + f"; ≤ 3× the floor ({check_s / floor_s:.1f}×) → {_verdict(check_s <= 3 * floor_s)}"
        + f"; no test costs more than the scan (worst {worst} {spent[worst] / floor_s:.1f}×) → "
        + _verdict(spent[worst] <= floor_s)
    )
    bound_s, sorts_cpu, bound_line = _lower_bound(model, start, end, floor_s)
    print(bound_line)
    if bound_s > 3 * floor_s:
        print("  → ≤ 3× the floor is out of reach on this machine for this window, whatever the check does")
    if sorts_cpu > floor_s:
        print(
            "  → no test above the scan is out of reach here for the drift tests: their sorts alone, summed "
            "over the columns as their stage is, take longer than the scan"
        )
    # The same window checked again, its labels fed to the detector already: what an hourly
    # check of a sliding window mostly is (it feeds only the labels that came since). Both are
    # printed; the target line above is the first check's.
    QualityCheck.objects.filter(model=model).delete()
    spent, undo = _timed_stages()
    t = time.perf_counter()
    again = quality_check_run(model_id=model.pk, window=range_window(start, end))
    again_s = time.perf_counter() - t
    undo()
    assert again is not None and again.n_samples == n and spent["detector_feed"] < 0.1 * check_s
    print(
        f"the same check again, its labels fed already: {again_s:.2f} s = {again_s / floor_s:.1f}× the floor "
        f"(detector_feed {spent['detector_feed']:.3f} s)"
        + (f"; ≤ {limit:.0f} s → {_verdict(again_s <= limit)}" if limit else "")
    )
    before, peak = _check_peak(url, model, start, end)
    print(
        f"peak memory of the check (a fresh worker process, anonymous memory; the check run again): "
        f"{before:.2f} GiB before it, {peak:.2f} GiB at its peak, +{peak - before:.2f} GiB "
        f"(target ≤ 2 GiB at 10M) → {_verdict(peak <= 2.0)}"
    )
    print(_duckdb_floor(model, columns, media))
    if ingest_rate is not None:  # last: the COPY's rows, deleted, would count in the table's bytes above
        copy_n = min(n, 200_000)
        copy_rate = _copy_rate(copy_n)
        ratio = ingest_rate / copy_rate
        print(
            f"raw COPY of {copy_n:,} such rows into the JSON table of before the columnar store: {copy_rate:,.0f} samples/s; ingest = "
            f"{ratio:.2f}× COPY (target ≥ 1.5×, there with 4 clients: bench/ingest.py) → {_verdict(ratio >= 1.5)}"
        )


def fanout(n: int, k: int) -> None:
    """The tabular window's check fanned out over ``k`` slices, run here one after another (the
    tasks' services, their messages kept back): each slice's time, the merge's, and the wall time
    k workers would take (the longest slice, then the merge) beside one worker's check; the
    figures compared with that check's."""
    from django.test import override_settings

    import monitoring.fanout as fan
    from monitoring.checks import check_merge_run, quality_check_run
    from monitoring.models import CheckSlice, PredictionSample, QualityCheck
    from monitoring.window import range_window
    from registry.models import RegisteredModel

    model = RegisteredModel.objects.get(name=f"scale-{n}")
    start = PredictionSample.objects.filter(model=model).order_by("timestamp").first().timestamp  # type: ignore[union-attr]
    window = range_window(start, start + 24 * HOUR)
    QualityCheck.objects.filter(model=model).delete()
    t = time.perf_counter()
    single = quality_check_run(model_id=model.pk, window=window)
    single_s = time.perf_counter() - t
    assert single is not None
    QualityCheck.objects.filter(model=model).delete()
    sent: list[Any] = []
    setattr(fan, "enqueue", lambda name, args: sent.append((name, args)))  # noqa: B010
    with override_settings(DRIFTWATCH_CHECK_FANOUT_ROWS=1, DRIFTWATCH_CHECK_SLICE_ROWS=-(-n // k)):
        t = time.perf_counter()
        row = quality_check_run(model_id=model.pk, window=window)
        cut_s = time.perf_counter() - t
        assert row is not None
        spent = []
        for piece in CheckSlice.objects.filter(quality_check=row).order_by("index"):
            t = time.perf_counter()
            assert fan.slice_run(piece.pk)
            spent.append(time.perf_counter() - t)
        t = time.perf_counter()
        merged = check_merge_run(check_id=row.pk, attempt=row.attempts)
        merge_s = time.perf_counter() - t
    assert merged is not None and merged.data_quality["fanout"]["merged"], merged and merged.error
    # Past SAMPLE_ABOVE a distance is scored on a sample of the column: one worker's is of its
    # rows, the merge's of the merged (sorted) values, each within its stated error.
    pairs = [(merged.drift["columns"][c], single.drift["columns"][c]) for c in single.drift["columns"]]
    decisions = all(a["drifted"] == b["drifted"] for a, b in pairs) and merged.metrics == single.metrics
    gap = max(abs((a["score"] or 0.0) - (b["score"] or 0.0)) for a, b in pairs)
    stated = max((b.get("sample") or {}).get("error", 0.0) for _, b in pairs)
    print(
        f"fan-out over {len(spent)} slices (run one after another here): cut {cut_s:.2f} s, slices "
        f"{' / '.join(f'{s:.2f}' for s in spent)} s, merge {merge_s:.2f} s; on {len(spent)} workers ≈ "
        f"{cut_s + max(spent) + merge_s:.2f} s against one worker's check {single_s:.2f} s; the same "
        f"decisions and metrics: {decisions}; the largest score gap {gap:.2g} (a sampled score's stated "
        f"error: at most {stated:.2g}); PCA mean error {merged.drift['multivariate']['score']:.6f} "
        f"(every row) against {single.drift['multivariate']['score']:.6f}"
        + (" (a sample of rows)" if "sample" in single.drift["multivariate"] else "")
    )


def _earlier(name: str) -> tuple[Any, datetime, datetime]:
    """--reuse: the model of that name an earlier run made, and its day's window (None if none)."""
    from monitoring.models import PredictionSample
    from registry.models import RegisteredModel

    model = RegisteredModel.objects.filter(name=name).first()
    if model is None:
        return None, datetime.min.replace(tzinfo=UTC), datetime.min.replace(tzinfo=UTC)
    start = PredictionSample.objects.filter(model=model).order_by("timestamp").first().timestamp  # type: ignore[union-attr]
    return model, start, start + 24 * HOUR


def _regression_samples(
    prefix: str, start: int, n: int, t0: datetime, step_s: float, rng: Any
) -> list[dict[str, Any]]:
    """A regressor's rows: N_FEATURES numbers, its prediction off the truth (``_truth``) by more
    as x0 grows: what DLE learns."""
    x = rng.normal(size=(n, N_FEATURES)).round(6)
    truth = 2 * x[:, 0] + x[:, 1]
    prediction = truth + rng.normal(0, 0.1 + np.clip(x[:, 0], 0, None))
    return [
        {
            "id": f"{prefix}{start + i}",
            "timestamp": (t0 + timedelta(seconds=(start + i) * step_s)).isoformat(),
            "features": {f"x{j}": row[j] for j in range(N_FEATURES)},
            "prediction": float(prediction[i]),
        }
        for i, row in enumerate(x.tolist())
    ]


def _truth(sample: dict[str, Any]) -> float:
    return float(2 * sample["features"]["x0"] + sample["features"]["x1"])


def regression(n: int, url: str) -> None:
    """DLE on a regressor's window of N samples × N_FEATURES numerical (past SAMPLE_ABOVE, so its
    features are deferred), each way checked in a fresh process as ``_check_peak`` runs one,
    alternately: its trees on a sample of rows (as a check runs), on every row with the inputs
    read a block of DLE_BLOCK_ROWS rows at a time, and on every row read whole (before); the
    peak memory and time of each, and the estimates."""
    import multiprocessing

    from django.utils import timezone

    from monitoring.models import MonitoringPolicy
    from registry.services import model_register, reference_upload

    name = f"reg-{n}"
    model, start, end = _earlier(name)
    if model is None:
        schema = _tabular_schema(name)
        schema.update(task="regression", classes=[])
        model = model_register(data=schema)
        ref = _regression_samples("r", 0, 5000, timezone.now(), 0, np.random.default_rng(1))
        reference_upload(
            model=model,
            rows=[
                {"features": r["features"], "prediction": r["prediction"], "label": _truth(r)} for r in ref
            ],
        )
        MonitoringPolicy.objects.update_or_create(
            model=model, defaults={"min_samples": 100, "min_labels": 50}
        )
        end = timezone.now().replace(minute=0, second=0, microsecond=0) - HOUR
        start = end - 24 * HOUR
        ingest_s, _ = _ingest(
            model, n, start, (end - start).total_seconds() / n, 0.0, samples=_regression_samples
        )
        print(f"regression: {n:,} samples × {N_FEATURES} numerical ingested in {ingest_s:.1f} s")
        _compact(model, end)
    ways = {
        "sampled": "on a sample of rows (a check)",
        "blocks": "on every row, read a block at a time",
        "whole": "on every row, read whole (before)",
    }
    runs: dict[str, list[tuple[int, int, float, str]]] = {way: [] for way in ways}
    for _ in range(2):
        for way in ways:
            with multiprocessing.get_context("spawn").Pool(1) as pool:
                runs[way].append(pool.apply(_dle_child, (url, model.pk, start, end, way)))
    for way, found in runs.items():
        print(
            f"regression {n:,}: DLE {ways[way]}: "
            + ", ".join(
                f"check {s:.2f} s, peak +{(peak - before) / 2**20:.2f} GiB" for before, peak, s, _ in found
            )
        )
    for way, found in runs.items():
        mae = json.loads(found[0][3])["metrics"]["mae"]
        print(f"regression {n:,}: DLE {ways[way]}: MAE {mae['value']:.6f}, sample {mae.get('sample')}")
    every = {estimate for way in ("blocks", "whole") for *_, estimate in runs[way]}
    print(f"regression {n:,}: every row the same estimates read by blocks or whole: {len(every) == 1}")


def _dle_child(
    url: str, model_id: int, start: datetime, end: datetime, way: str
) -> tuple[int, int, float, str]:
    """In a fresh process: the regressor's check, DLE's way (``regression``) → anonymous memory
    before it and at its peak (KiB), its seconds, and its DLE estimates."""

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _pg import django_on

    django_on(url)
    import workers.tasks.monitoring  # noqa: F401  # what a check worker imports at its start
    from monitoring import checks
    from monitoring.models import QualityCheck
    from monitoring.reference import reference_state
    from monitoring.window import range_window
    from registry.models import RegisteredModel
    from workers.drift import sorts

    if way != "sampled":  # the trees on every row: no sample for DLE alone (the rest as it runs)
        estimate = checks._estimate_regression

        def every_row(*args: Any) -> Any:
            above, sorts.SAMPLE_ABOVE = sorts.SAMPLE_ABOVE, 1 << 62
            try:
                return estimate(*args)
            finally:
                sorts.SAMPLE_ABOVE = above

        checks._estimate_regression = every_row  # type: ignore[assignment]
    if way == "whole":
        checks.DLE_BLOCK_ROWS = 1 << 62  # every window's inputs read whole, as before
    QualityCheck.objects.filter(model_id=model_id).delete()
    reference_state(model=RegisteredModel.objects.get(pk=model_id))  # a worker's cache, warm
    before, peak, seconds, check = with_peak(
        lambda: checks.quality_check_run(model_id=model_id, window=range_window(start, end))
    )
    assert check is not None and check.state == "done", check and (check.state, check.error)
    return before, peak, seconds, json.dumps(check.estimated, sort_keys=True)


def categorical(n: int) -> None:
    """A window of whole hours with N_FEATURES categorical features, checked from the hours'
    summaries (the counts written at compaction: what a check asks for) and again reading the
    columns (``counted=False``), alternately, three times each after a warm-up run, in this
    process (medians, and the stages of each way's last run); the same result both ways."""
    from django.utils import timezone

    import monitoring.checks as checks
    from monitoring.checks import quality_check_run
    from monitoring.models import MonitoringPolicy, QualityCheck
    from monitoring.window import range_window
    from registry.services import model_register, reference_upload

    name = f"cat-{n}"
    model, start, end = _earlier(name)
    if model is None:
        schema = _tabular_schema(name)
        schema["features"] = [{"name": f"c{j}", "type": "categorical"} for j in range(N_FEATURES)]
        model = model_register(data=schema)
        ref = _categorical_samples("r", 0, 5000, timezone.now(), 0, np.random.default_rng(1))
        reference_upload(
            model=model,
            rows=[
                {"features": r["features"], "label": r["prediction"], "prediction": r["prediction"]}
                for r in ref
            ],
        )
        MonitoringPolicy.objects.update_or_create(
            model=model, defaults={"min_samples": 100, "min_labels": 50}
        )
        end = timezone.now().replace(minute=0, second=0, microsecond=0) - HOUR
        start = end - 24 * HOUR
        ingest_s, _ = _ingest(model, n, start, (end - start).total_seconds() / n, 0.0, _categorical_samples)
        print(
            f"categorical: ingest of {n:,} samples × {N_FEATURES} categorical: {n / ingest_s:,.0f} samples/s"
        )
    _compact(model, end)
    columns = [f"feature:c{j}" for j in range(N_FEATURES)] + ["prediction", "proba:0", "proba:1", "sample_id"]
    floor_s, _ = _floor_scan(model, columns, start, end)
    load = getattr(checks, "window_load")  # noqa: B009

    def run(counted: bool) -> tuple[float, dict[str, float], Any]:
        QualityCheck.objects.filter(model=model).delete()
        forced = lambda **kw: load(**{**kw, "counted": counted and kw.get("counted", False)})  # noqa: E731
        setattr(checks, "window_load", forced)  # noqa: B010
        spent, undo = _timed_stages()
        t = time.perf_counter()
        try:
            check = quality_check_run(model_id=model.pk, window=range_window(start, end))
        finally:
            undo()
            setattr(checks, "window_load", load)  # noqa: B010
        assert check is not None and check.n_samples == n, check and (check.state, check.error)
        return time.perf_counter() - t, spent, check

    runs: dict[bool, list[float]] = {True: [], False: []}
    stages: dict[bool, dict[str, float]] = {}
    results: dict[bool, Any] = {}
    run(False)  # warm: the reference loaded, the imports done, the parts' pages cached
    for counted in (True, False) * 3:
        took, spent, check = run(counted)
        runs[counted].append(took)
        stages[counted] = spent
        results[counted] = (check.drift, check.data_quality, check.prediction_drift)
    same = results[True] == results[False]
    best = {k: float(np.median(v)) for k, v in runs.items()}
    print(
        f"categorical: floor (pyarrow scan of the window's {len(columns)} columns) {floor_s:.3f} s; a check of "
        f"{n:,} × {N_FEATURES} categorical over whole hours: from the summaries "
        f"{' / '.join(f'{t:.2f}' for t in runs[True])} s, reading the columns "
        f"{' / '.join(f'{t:.2f}' for t in runs[False])} s: medians {best[True]:.2f} / {best[False]:.2f} s, "
        f"{best[False] / best[True]:.2f}× faster "
        f"({best[True] / floor_s:.1f}× the floor, against {best[False] / floor_s:.1f}×); the same results: {same}"
    )
    for stage in (
        "window_load",
        "_features_measure",
        "multivariate_drift",
        "column_quality",
        "Window.feature",
    ):
        print(f"  {stage:22} summaries {stages[True][stage]:7.3f} s   columns {stages[False][stage]:7.3f} s")
    assert same, "a check from the summaries differs from the check reading the columns"


def embedding(n: int, dim: int) -> None:
    from django.utils import timezone

    from monitoring.models import SamplePart
    from monitoring.samples import WindowBounds, sample_source
    from monitoring.services import predictions_ingest
    from registry.services import model_register

    model = model_register(
        data={
            "name": f"emb-{n}",
            "task": "regression",
            "features": [{"name": "e", "type": "embedding", "dim": dim}],
        }
    )
    end = timezone.now().replace(minute=0, second=0, microsecond=0) - HOUR
    start = end - HOUR
    rng = np.random.default_rng(2)
    spent = 0.0
    for s in range(0, n, BATCH // 2):
        k = min(BATCH // 2, n - s)
        vectors = rng.normal(size=(k, dim)).astype("float32").tolist()
        body = [
            {
                "id": f"e{s + i}",
                "timestamp": (start + timedelta(seconds=(s + i) * 3600 / n)).isoformat(),
                "features": {"e": vectors[i]},
                "prediction": 0.0,
            }
            for i in range(k)
        ]
        t = time.perf_counter()
        predictions_ingest(model=model, body={"samples": body})
        spent += time.perf_counter() - t
    parts = sum(
        SamplePart.objects.filter(model=model, retired_at__isnull=True).values_list("size", flat=True)
    )
    print(f"ingest: {n:,} samples × one {dim}-dim embedding in {spent:.1f} s = {n / spent:,.0f} samples/s")
    print(
        f"bytes/sample, one {dim}-dim embedding: parts {parts / n:.0f}; float32 payload {dim * 4}: {parts / n / (dim * 4):.3f}× "
        f"(target ≤ 1.2×) → {_verdict(parts / n / (dim * 4) <= 1.2)}"
    )
    floor_s, _ = _floor_scan(model, ["feature:e"], start, end)
    t = time.perf_counter()
    loaded = sample_source().load(model=model, window=WindowBounds(start, end), columns=["e"])
    load_s = time.perf_counter() - t
    matrix = np.vstack(loaded.arrays["e"])
    stack_s = time.perf_counter() - t
    assert matrix.shape == (n, dim) and matrix.dtype == np.float32
    print(
        f"embedding window {n:,} × {dim} read into arrays: {load_s:.3f} s (into one float32 matrix {stack_s:.3f} s); "
        f"floor {floor_s:.3f} s: {load_s / floor_s:.1f}×; target ≤ 1 s at 100,000 → {_verdict(load_s <= 1.0)}"
        + ("" if n == 100_000 else " (at this n)")
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=1_000_000)
    parser.add_argument("--embedding-samples", type=int, default=100_000, help="0: skip the embedding part")
    parser.add_argument("--dim", type=int, default=768)
    parser.add_argument(
        "--categorical-samples", type=int, default=1_000_000, help="0: skip the summaries' part"
    )
    parser.add_argument("--fanout-slices", type=int, default=0, help="the tabular check fanned out too")
    parser.add_argument(
        "--regression-samples",
        type=int,
        default=0,
        help="a regressor's DLE on deferred features (0: skipped)",
    )
    parser.add_argument("--reuse", help="an earlier run's media folder (its database kept): skip ingestion")
    args = parser.parse_args()
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]  # each figure as it comes
    media = Path(tempfile.mkdtemp(prefix="dw-scale."))
    os.environ["DRIFTWATCH_MEDIA_ROOT"] = str(media)
    os.environ["DRIFTWATCH_SAMPLE_SOURCE"] = "columnar"
    url = bench_database_url(suffix="_scale")
    if args.reuse:
        media = Path(args.reuse)  # the database and parts of an earlier run: its windows, no ingest
        os.environ["DRIFTWATCH_MEDIA_ROOT"] = str(media)
    else:
        drop_database(url)  # a fresh one: table sizes per sample count no rows of an earlier run
    django_on(url)
    from registry.models import RegisteredModel

    # --reuse keeps the tabular model (its window is what it checks again); the embedding one is remade.
    RegisteredModel.objects.filter(
        name__in=[f"emb-{args.embedding_samples}"]
        + ([] if args.reuse else [f"scale-{args.samples}", f"reg-{args.regression_samples}"])
    ).delete()
    print(f"bench/scale.py  {datetime.now(UTC):%Y-%m-%d %H:%M} UTC  media {media}")
    if args.samples:  # 0: skip the tabular check
        tabular(args.samples, media, url)
        if args.fanout_slices:
            fanout(args.samples, args.fanout_slices)
    if args.categorical_samples:
        categorical(args.categorical_samples)
    if args.regression_samples:
        regression(args.regression_samples, url)
    if args.embedding_samples:  # 0: the tabular check alone
        embedding(args.embedding_samples, args.dim)


if __name__ == "__main__":
    main()
