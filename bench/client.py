"""Python client benchmark (clients/python, driftwatch_client), three parts:

1. latency: log_prediction / log_label p50, p99 while the server is down (nothing listens on the
   client's port: every send is refused and retried), while the queue fills and once it is full.
   Target: p99 ≤ 50 µs.
2. outage memory: --outage-seconds of steady logging (--rate per second) with the server down
   and the default queue bounds; RSS and traced memory sampled every 10 s. The stated bound:
   growth ≤ max_queue_bytes + 256 B × max_queue_size, flat once the queue is full.
3. restart: the platform's gunicorn on PostgreSQL (its own `<db>_bench` database) stopped for
   --restart-seconds while the client keeps logging, then started again: rows lost / duplicated.
   Skipped with --restart-seconds 0.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/driftwatch python bench/client.py \\
        --outage-seconds 600 --restart-seconds 60
"""

import argparse
import gc
import os
import resource
import signal
import subprocess
import sys
import time
import tracemalloc
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "clients" / "python" / "src"))
sys.path.insert(0, str(HERE))
from _pg import ROOT, bench_database_url, django_on  # noqa: E402
from driftwatch_client import Monitor  # noqa: E402

from driftwatch.paths import gunicorn_argv  # noqa: E402

MODEL = "bench-client"
NUMERIC = [f"x{i}" for i in range(10)]
FEATURES = [{"name": n, "type": "numerical"} for n in NUMERIC] + [
    {"name": "segment", "type": "categorical"},
    {"name": "channel", "type": "categorical"},
]
CLASSES = ["neg", "pos"]
PER_ITEM_OVERHEAD = 256  # bytes of bookkeeping per queued item (tuple, bytes header, deque slot)


def features(i: int) -> dict[str, Any]:
    v = (i * 104729) % 1000 / 1000
    return {
        **{n: round(v * (k + 1), 4) for k, n in enumerate(NUMERIC)},
        "segment": "abcd"[i % 4],
        "channel": "web",
    }


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def percentiles(ns: list[int]) -> str:
    ns.sort()

    def at(q: float) -> float:
        return ns[min(len(ns) - 1, int(q * len(ns)))] / 1000

    return (
        f"p50={at(0.50):.1f} µs  p99={at(0.99):.1f} µs  p99.9={at(0.999):.1f} µs  max={ns[-1] / 1000:.0f} µs"
    )


def bench_latency(n: int) -> None:
    monitor = Monitor(url=f"http://127.0.0.1:{free_port()}", token="t", model=MODEL, max_queue_size=n)
    proba = {"neg": 0.3, "pos": 0.7}
    clock = time.perf_counter_ns
    filling, full, labels = [], [], []
    for i in range(2 * n):
        sample_id, feats = f"lat-{i}", features(i)  # built outside the timed call
        t0 = clock()
        monitor.log_prediction(sample_id, feats, "pos", proba)
        (filling if i < n else full).append(clock() - t0)
    stats = monitor.stats()
    monitor.close(0)
    monitor = Monitor(url=f"http://127.0.0.1:{free_port()}", token="t", model=MODEL, max_queue_size=n)
    for i in range(n):
        t0 = clock()
        monitor.log_label(f"lat-{i}", "neg")
        labels.append(clock() - t0)
    monitor.close(0)
    print(f"server down, {n:,} calls each (sender thread retrying connection-refused sends meanwhile):")
    print(f"  log_prediction, queue filling : {percentiles(filling)}")
    print(f"  log_prediction, queue full    : {percentiles(full)}  ({stats.dropped['queue_full']:,} dropped)")
    print(f"  log_label, queue filling      : {percentiles(labels)}")


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def bench_outage(seconds: float, rate: float) -> None:
    monitor = Monitor(url=f"http://127.0.0.1:{free_port()}", token="t", model=MODEL)
    bound = monitor.max_queue_bytes + PER_ITEM_OVERHEAD * monitor.max_queue_size
    gc.collect()
    tracemalloc.start()
    rss0, traced0 = rss_bytes(), tracemalloc.get_traced_memory()[0]
    start = time.monotonic()
    i, next_report, peak_rss = 0, 10.0, 0
    print(f"outage: server down {seconds:.0f} s, logging {rate:,.0f}/s, default bounds "
          f"({monitor.max_queue_size:,} items, {monitor.max_queue_bytes / 2**20:.0f} MiB); "
          f"stated bound on growth {bound / 2**20:.1f} MiB")  # fmt: skip
    while (elapsed := time.monotonic() - start) < seconds:
        due = min(int(elapsed * rate), i + int(rate / 10))  # small steps: the reports stay on time
        while i < due:
            monitor.log_prediction(f"out-{i}", features(i), "pos", {"neg": 0.3, "pos": 0.7})
            i += 1
        if elapsed >= next_report:
            rss, traced = rss_bytes() - rss0, tracemalloc.get_traced_memory()[0] - traced0
            peak_rss = max(peak_rss, rss)
            s = monitor.stats()
            print(f"  t={elapsed:5.0f}s logged={i:,} queued={s.queued:,} ({s.queued_bytes / 2**20:.1f} MiB) "
                  f"dropped={s.dropped['queue_full']:,} retried={s.retried:,} "
                  f"RSS +{rss / 2**20:.1f} MiB traced +{traced / 2**20:.1f} MiB", flush=True)  # fmt: skip
            next_report += 10
        time.sleep(0.002)
    traced_peak = tracemalloc.get_traced_memory()[1] - traced0
    tracemalloc.stop()
    final = rss_bytes() - rss0
    peak_rss = max(peak_rss, final)
    verdict = "within" if max(peak_rss, traced_peak) <= bound else "OVER"
    print(f"  peak growth: RSS +{peak_rss / 2**20:.1f} MiB, traced +{traced_peak / 2**20:.1f} MiB — {verdict} "
          f"the {bound / 2**20:.1f} MiB bound")  # fmt: skip
    monitor.close(0)


def setup_platform(url: str) -> str:
    django_on(url)
    from django.contrib.auth import get_user_model

    from core.services import api_token_create
    from registry.models import RegisteredModel
    from registry.services import model_register

    RegisteredModel.objects.filter(name=MODEL).delete()
    model_register(data={"name": MODEL, "task": "classification", "features": FEATURES, "classes": CLASSES})
    user, _ = get_user_model().objects.get_or_create(username="bench")
    return api_token_create(user=user, scope="ingest", rate_limit_per_minute=0)[1]


def start_gunicorn(url: str, port: int) -> subprocess.Popen[bytes]:
    import http.client

    env = dict(os.environ, DATABASE_URL=url, DRIFTWATCH_DEBUG="0", SECRET_KEY="bench-" + uuid.uuid4().hex)
    cmd = gunicorn_argv(f"127.0.0.1:{port}", 2, "--log-level", "warning", "--graceful-timeout", "5")
    server = subprocess.Popen(cmd, cwd=ROOT, env=env)
    for _ in range(240):
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/healthz")
            if conn.getresponse().status in (200, 503):
                return server
        except OSError:
            time.sleep(0.25)
    server.kill()
    raise SystemExit("gunicorn did not start")


def bench_restart(seconds: float, rate: float) -> None:
    url = bench_database_url()
    token = setup_platform(url)
    port = free_port()
    server = start_gunicorn(url, port)
    monitor = Monitor(url=f"http://127.0.0.1:{port}", token=token, model=MODEL)
    logged = 0

    def log_for(duration: float) -> None:
        nonlocal logged
        base, start = logged, time.monotonic()
        while (elapsed := time.monotonic() - start) < duration:
            while logged < base + int(elapsed * rate):
                monitor.log_prediction(
                    f"r-{logged}", features(logged), CLASSES[logged % 2], {"neg": 0.4, "pos": 0.6}
                )
                monitor.log_label(f"r-{logged}", CLASSES[logged // 2 % 2])
                logged += 1
            time.sleep(0.005)

    try:
        log_for(5)
        server.send_signal(signal.SIGTERM)
        server.wait(30)
        down = time.monotonic()
        log_for(seconds)
        server = start_gunicorn(url, port)
        print(f"restart: gunicorn down {time.monotonic() - down:.0f} s (stopped, then started again)")
        log_for(5)
        t0 = time.monotonic()
        flushed = monitor.flush(300)
        drained = time.monotonic() - t0
        stats = monitor.stats()
        monitor.close()
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(30)
    from django.db.models import Count

    from monitoring.models import GroundTruth, PredictionSample

    rows = PredictionSample.objects.filter(model__name=MODEL)
    stored, distinct = rows.count(), rows.aggregate(n=Count("sample_id", distinct=True))["n"]
    labels = GroundTruth.objects.filter(model__name=MODEL).count()
    print(f"  logged {logged:,} predictions + {logged:,} labels at {rate:,.0f}/s; flush {flushed} in {drained:.1f} s; "
          f"retried requests {stats.retried:,}; dropped {stats.dropped}; last error {stats.last_error!r}")  # fmt: skip
    print(f"  stored {stored:,} predictions ({distinct:,} distinct ids), {labels:,} labels: "
          f"lost {logged - distinct:,}, duplicated {stored - distinct:,}; "
          f"server-reported duplicates (re-sent, deduplicated) {stats.duplicates:,}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=100_000, help="log calls per latency series")
    parser.add_argument("--outage-seconds", type=float, default=600.0, help="0: skip the outage memory part")
    parser.add_argument("--rate", type=float, default=5_000.0, help="predictions/s logged during the outage")
    parser.add_argument("--restart-seconds", type=float, default=60.0, help="0: skip the gunicorn restart")
    parser.add_argument("--restart-rate", type=float, default=200.0, help="prediction+label pairs/s")
    args = parser.parse_args()
    bench_latency(args.calls)
    if args.outage_seconds > 0:
        bench_outage(args.outage_seconds, args.rate)
    if args.restart_seconds > 0:
        bench_restart(args.restart_seconds, args.restart_rate)


if __name__ == "__main__":
    main()
