"""Benchmark: /metrics scrape time with 100 models (checks, alerts, retraining jobs, GPUs) and
after 1,000 gunicorn worker recycles in prometheus-client's multiprocess mode.

    DATABASE_URL=postgres://… python bench/metrics.py [--models 100] [--checks 240] [--recycles 1000]

Runs on a private `<db>_metricsbench` PostgreSQL database, seeded once and reused. The scrape
goes through Django's test client with a read token (the real view, auth, collectors and
exposition; no network). A recycle is simulated as gunicorn leaves it: a dead worker's counter
and histogram files (copies of this process's, which counted ingestion for every model and
latency for a dozen routes) in PROMETHEUS_MULTIPROC_DIR. Measured three ways: one live worker;
1,000 dead workers' files left as the library's `mark_process_dead` leaves them; the same after
`process_fold` (what the gunicorn child_exit hook runs). Target: every scrape ≤ 200 ms (p95).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

# Multiprocess mode from the first import of prometheus-client, as under gunicorn.
FOLDER = Path(tempfile.mkdtemp(prefix="driftwatch-metricsbench-"))
os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(FOLDER)
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _pg import bench_database_url, django_on  # noqa: E402

TARGET_MS = 200.0
FEATURES = [f"f{i}" for i in range(8)]
ROUTES = [
    "/api/v1/models/<str:name>/predictions",
    "/api/v1/models/<str:name>/labels",
    "/api/v1/models/<str:name>/checks",
    "/api/v1/models/<str:name>/alerts",
    "/api/v1/retrain-jobs/<int:pk>",
    "/models/<str:name>/",
    "/",
    "/metrics",
    "/healthz",
    "/admin/",
    "/api/docs/",
    "unmatched",
]


def _drift(i: int) -> dict[str, Any]:
    columns = {
        name: {
            "column_type": "numerical",
            "method": "ks",
            "score": 0.2,
            "threshold": 0.05,
            "drifted": j < i % 3,
        }
        for j, name in enumerate(FEATURES)
    }
    return {"columns": columns, "share": (i % 3) / len(FEATURES), "dataset_drift": False, "drift_share": 0.5}


def seed(n_models: int, n_checks: int) -> None:
    from django.utils import timezone

    from monitoring.models import Alert, QualityCheck
    from registry.models import RegisteredModel
    from retraining.inventory import DeviceReport, devices_report
    from retraining.models import GpuPlacement, RetrainJob

    if RegisteredModel.objects.filter(name__startswith="bench-m").count() == n_models and (
        QualityCheck.objects.count() == n_models * n_checks
    ):
        return
    started = time.perf_counter()
    RegisteredModel.objects.all().delete()
    end = timezone.now().replace(minute=0, second=0, microsecond=0)
    features = [{"name": n, "type": "numerical"} for n in FEATURES]
    models = RegisteredModel.objects.bulk_create(
        [RegisteredModel(name=f"bench-m{i:03d}", task="classification", features=features, classes=["0", "1"])
         for i in range(n_models)]
    )  # fmt: skip
    for model in models:
        checks = []
        for i in range(n_checks):
            window_end = end - timedelta(hours=n_checks - i)
            checks.append(
                QualityCheck(
                    model=model,
                    window_spec="24h",
                    window_start=window_end - timedelta(hours=24),
                    window_end=window_end,
                    state="done",
                    started_at=window_end,
                    finished_at=window_end + timedelta(seconds=4),
                    n_samples=500,
                    n_labelled=400,
                    metrics={"n": 400, "accuracy": 0.9, "f1_macro": 0.88, "accuracy_ci": [0.87, 0.93]},
                    estimated={"metric": "accuracy", "value": 0.89, "ci": [0.86, 0.92]},
                    drift=_drift(i),
                )  # fmt: skip
            )
        QualityCheck.objects.bulk_create(checks, batch_size=1000)
        alerts = [
            Alert(
                model=model, kind=kind, state="resolved", message="bench", opened_at=end - timedelta(days=k)
            )
            for k, kind in enumerate(["data_drift", "accuracy_drop"] * 10)
        ]
        alerts.append(Alert(model=model, kind="data_drift", state="open", message="bench", opened_at=end))
        Alert.objects.bulk_create(alerts)
        jobs = [
            RetrainJob(model=model, state="succeeded", trigger="alert", finished_at=end,
                       estimated_peak_bytes=1_000_000 + k * 50_000, measured_peak_bytes=1_100_000)
            for k in range(5)
        ]  # fmt: skip
        RetrainJob.objects.bulk_create(jobs)
    gib = 2**30
    devices = devices_report(
        host="bench", devices=[DeviceReport(i, "sim", 24 * gib, 20 * gib, True) for i in range(4)]
    )
    for i, model in enumerate(models[:20]):
        job = RetrainJob.objects.create(model=model, state="running", trigger="alert")
        GpuPlacement.objects.create(job=job, device=devices[i % 4], reserved_bytes=2 * gib)
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")  # the planner's statistics, as autovacuum would have them
    print(f"seeded {n_models} models x {n_checks} checks in {time.perf_counter() - started:.0f} s")


def live_worker_counts(n_models: int) -> None:
    """What one long-lived worker has counted: ingestion for every model, latency per route."""
    from core.metrics import (
        INGEST_ACCEPTED,
        INGEST_DUPLICATES,
        INGEST_REJECTED_REQUESTS,
        INGEST_REJECTED_ROWS,
        REQUEST_SECONDS,
        RESPONSES,
    )

    for i in range(n_models):
        name = f"bench-m{i:03d}"
        for kind in ("predictions", "labels"):
            INGEST_ACCEPTED.labels(name, kind).inc(1000)
            INGEST_DUPLICATES.labels(name, kind).inc(3)
            INGEST_REJECTED_REQUESTS.labels(name, kind).inc()
            for reason in ("features", "timestamp", "unknown_field"):
                INGEST_REJECTED_ROWS.labels(name, kind, reason).inc(2)
    for route in ROUTES:
        for method in ("GET", "POST"):
            for seconds in (0.004, 0.03, 0.2, 1.5):
                REQUEST_SECONDS.labels(route, method).observe(seconds)
            for status in ("200", "400", "503"):
                RESPONSES.labels(route, method, status).inc()


CPU_MS: list[float] = []  # this process's CPU time per scrape of the latest series (contention aside)


def time_scrapes(client: Any, repeat: int) -> tuple[float, float, str]:
    times = []
    body = ""
    CPU_MS.clear()
    for _ in range(repeat):
        started, cpu = time.perf_counter(), time.process_time()
        response = client.get("/metrics")
        times.append((time.perf_counter() - started) * 1000)
        CPU_MS.append((time.process_time() - cpu) * 1000)
        assert response.status_code == 200, response.content[:200]
        body = response.content.decode()
    times.sort()
    return statistics.median(times), times[int(0.95 * (len(times) - 1))], body


def accepted_total(body: str) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    return sum(
        s.value
        for f in text_string_to_metric_families(body)
        for s in f.samples
        if s.name == "driftwatch_ingest_accepted_rows_total"
    )


def source_ms(body: str) -> float:
    line = next(
        x for x in body.splitlines() if x.startswith('driftwatch_metrics_source_seconds{source="database"}')
    )
    return float(line.split()[-1]) * 1000


def simulate_recycles(n: int) -> list[int]:
    """Dead workers' files as gunicorn leaves them (fake pids above any real one)."""
    from prometheus_client import multiprocess

    own = os.getpid()
    pids = [4_000_000 + i for i in range(n)]
    for pid in pids:
        for typ in ("counter", "histogram"):
            shutil.copyfile(FOLDER / f"{typ}_{own}.db", FOLDER / f"{typ}_{pid}.db")
        multiprocess.mark_process_dead(pid)  # the library's clean-up: removes live gauges only
    return pids


def report(label: str, p50: float, p95: float, body: str) -> None:
    files = len(list(FOLDER.glob("*.db")))
    verdict = "ok" if p95 <= TARGET_MS else f"OVER {TARGET_MS:.0f} ms"
    print(
        f"{label:<44} p50 {p50:7.1f} ms  p95 {p95:7.1f} ms  cpu p50 {statistics.median(CPU_MS):7.1f} ms  "
        f"database {source_ms(body):6.1f} ms  "
        f"files {files:5d}  {len(body) / 1024:6.0f} KiB  {verdict}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--models", type=int, default=100)
    parser.add_argument("--checks", type=int, default=240, help="checks per model (240: ten days, hourly)")
    parser.add_argument("--recycles", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    print(f"load average before the run: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")

    django_on(bench_database_url(suffix="_metricsbench"))
    from django.contrib.auth import get_user_model
    from django.test import Client

    from core.services import api_token_create
    from observability.multiprocess import process_fold

    seed(args.models, args.checks)
    user, _ = get_user_model().objects.get_or_create(username="metrics-bench")
    client = Client(HTTP_AUTHORIZATION=f"Bearer {api_token_create(user=user, scope='read')[1]}")
    live_worker_counts(args.models)
    try:
        print(f"{args.models} models, {args.checks} checks each; scrape x{args.repeat} through the view")
        p50, p95, body = time_scrapes(client, args.repeat)
        report("one live worker", p50, p95, body)

        pids = simulate_recycles(args.recycles)
        p50, p95, unfolded = time_scrapes(client, 3)  # seconds each: a few are enough
        report(f"{args.recycles} recycles, files left (mark_process_dead)", p50, p95, unfolded)

        started = time.perf_counter()
        for pid in pids:
            process_fold(pid, FOLDER)
        fold_ms = (time.perf_counter() - started) * 1000 / len(pids)
        p50, p95, folded = time_scrapes(client, args.repeat)
        report(f"{args.recycles} recycles, folded (child_exit hook)", p50, p95, folded)
        same = abs(accepted_total(unfolded) - accepted_total(folded)) < 1e-6
        print(
            f"fold: {fold_ms:.2f} ms per recycled worker (in the master); totals equal before/after: {same}"
        )
    finally:
        shutil.rmtree(FOLDER, ignore_errors=True)


if __name__ == "__main__":
    main()
