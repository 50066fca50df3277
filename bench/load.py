"""Load and integrity: concurrent clients post predictions and labels for a fixed time against
gunicorn + PostgreSQL + Redis while checks run (a Celery worker, and checks requested through the
API), then every acknowledged sample must be stored exactly once.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/driftwatch REDIS_URL=redis://127.0.0.1:6379/0 \\
        python bench/load.py                       # 50 clients, 60 s
    python bench/load.py --clients 10 --seconds 10   # the short form CI runs

Each client posts batches of fresh ids and, every fourth batch, sends the same batch again (a
client retry: its samples must come back as duplicates, not be stored twice); after each batch it
posts the labels of half of it. Uses (and empties) its own database, `<name>_load`. Prints
throughput, p50/p99 latency, errors by status, checks run, and the stored-exactly-once check;
exits non-zero on any error or mismatch.
"""

import argparse
import http.client
import json
import statistics
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _pg import ROOT, bench_database_url, django_on  # noqa: E402

sys.path.insert(0, str(ROOT))
from tests.live import celery_worker, child_env, web_server  # noqa: E402

MODEL = "load"
CLASSES = ["neg", "pos"]
FEATURES = {"x1": "numerical", "x2": "numerical", "segment": "categorical"}


@dataclass
class ClientStats:
    latencies: dict[str, list[float]] = field(default_factory=lambda: {"predictions": [], "labels": []})
    statuses: Counter[int] = field(default_factory=Counter)
    acknowledged: set[str] = field(default_factory=set)
    labelled: set[str] = field(default_factory=set)
    accepted: int = 0
    duplicates: int = 0
    retried: int = 0
    checks: int = 0


def _sample(sample_id: str, i: int) -> dict[str, Any]:
    v = (i * 7919) % 1000 / 1000
    return {
        "id": sample_id,
        "features": {"x1": v, "x2": 1 - v, "segment": "abc"[i % 3]},
        "prediction": CLASSES[i % 2],
        "probabilities": {"neg": round(1 - v, 3), "pos": round(v, 3)},
    }


def setup(url: str) -> str:
    """Migrate the load database, register the model with a reference, return an admin token."""
    django_on(url)
    from django.contrib.auth import get_user_model

    from core.services import api_token_create
    from monitoring.models import MonitoringPolicy
    from registry.models import RegisteredModel
    from registry.services import model_register, reference_upload

    RegisteredModel.objects.filter(name=MODEL).delete()
    features = [{"name": n, "type": t} for n, t in FEATURES.items()]
    model = model_register(
        data={"name": MODEL, "task": "classification", "features": features, "classes": CLASSES}
    )
    reference = [{**_sample(f"r{i}", i), "label": CLASSES[(i // 2) % 2]} for i in range(2000)]
    reference_upload(model=model, rows=[{k: v for k, v in r.items() if k != "id"} for r in reference])
    MonitoringPolicy.objects.filter(model=model).update(
        window_kind="samples", window_size=2000, min_samples=100, min_labels=50, cooldown_minutes=0
    )
    user, _ = get_user_model().objects.get_or_create(username="load", defaults={"is_staff": True})
    # No per-token rate limit: the bench measures the server, and a 429 would count as an error.
    return api_token_create(user=user, scope="admin", rate_limit_per_minute=0)[1]


class Client(threading.Thread):
    def __init__(self, index: int, port: int, token: str, batch: int, deadline: float) -> None:
        super().__init__(daemon=True)
        self.index, self.port, self.batch, self.deadline = index, port, batch, deadline
        self.headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        self.stats = ClientStats()

    def post(
        self, conn: http.client.HTTPConnection, kind: str, body: dict[str, Any]
    ) -> dict[str, Any] | None:
        started = time.perf_counter()
        conn.request("POST", f"/api/v1/models/{MODEL}/{kind}", body=json.dumps(body), headers=self.headers)
        response = conn.getresponse()
        payload = response.read()
        self.stats.latencies.setdefault(kind, []).append(time.perf_counter() - started)
        self.stats.statuses[response.status] += 1
        return json.loads(payload) if response.status in (200, 201) else None

    def run(self) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        n = 0
        while time.time() < self.deadline:
            ids = [f"c{self.index}-{n}-{i}" for i in range(self.batch)]
            body = {"samples": [_sample(s, i) for i, s in enumerate(ids)]}
            for attempt in range(2 if n % 4 == 3 else 1):  # every fourth batch is sent twice
                result = self.post(conn, "predictions", body)
                if result is not None:
                    self.stats.acknowledged.update(ids)
                    self.stats.accepted += result["accepted"]
                    self.stats.duplicates += result["duplicates"]
                    self.stats.retried += attempt
            labels = [{"id": s, "label": CLASSES[i % 2]} for i, s in enumerate(ids[::2])]
            if self.post(conn, "labels", {"labels": labels}) is not None:
                self.stats.labelled.update(label["id"] for label in labels)
            n += 1
        conn.close()


class Checker(threading.Thread):
    """Runs a check through the API every two seconds while the clients post."""

    def __init__(self, port: int, token: str, deadline: float) -> None:
        super().__init__(daemon=True)
        self.port, self.token, self.deadline = port, token, deadline
        self.statuses: Counter[int] = Counter()
        self.latencies: list[float] = []

    def run(self) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        headers = {"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"}
        while time.time() < self.deadline:
            started = time.perf_counter()
            conn.request("POST", f"/api/v1/models/{MODEL}/checks", body="{}", headers=headers)
            response = conn.getresponse()
            response.read()
            self.latencies.append(time.perf_counter() - started)
            self.statuses[response.status] += 1
            time.sleep(2)
        conn.close()


def stored() -> tuple[set[str], int, set[str], int]:
    from monitoring.models import GroundTruth, PredictionSample

    samples = list(PredictionSample.objects.filter(model__name=MODEL).values_list("sample_id", flat=True))
    labels = list(GroundTruth.objects.filter(model__name=MODEL).values_list("sample_id", flat=True))
    return set(samples), len(samples), set(labels), len(labels)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--batch", type=int, default=50, help="samples per request")
    parser.add_argument("--web-workers", type=int, default=4)
    args = parser.parse_args()

    url = bench_database_url(suffix="_load")
    token = setup(url)
    env = child_env(DATABASE_URL=url)
    with web_server(env, workers=args.web_workers) as base, celery_worker(env, concurrency=1):
        port = int(base.rsplit(":", 1)[1])
        began = time.time()
        deadline = began + args.seconds
        clients = [Client(i, port, token, args.batch, deadline) for i in range(args.clients)]
        checker = Checker(port, token, deadline)
        for thread in [*clients, checker]:
            thread.start()
        for thread in [*clients, checker]:
            thread.join(args.seconds + 300)
        elapsed = time.time() - began

    from monitoring.models import QualityCheck

    acknowledged = set().union(*(c.stats.acknowledged for c in clients))
    labelled = set().union(*(c.stats.labelled for c in clients))
    statuses = sum((c.stats.statuses for c in clients), Counter()) + checker.statuses
    latency = {
        k: [x for c in clients for x in c.stats.latencies.get(k, [])] for k in ("predictions", "labels")
    }
    accepted = sum(c.stats.accepted for c in clients)
    duplicates = sum(c.stats.duplicates for c in clients)
    retried = sum(c.stats.retried for c in clients)
    sample_ids, sample_rows, label_ids, label_rows = stored()
    errors = sum(n for status, n in statuses.items() if status >= 400)
    requests = sum(statuses.values())

    print(f"load: {args.clients} clients x {args.seconds:.0f} s, batches of {args.batch}, "
          f"gunicorn x{args.web_workers} + PostgreSQL + {'Redis' if 'REDIS_URL' in env else 'filesystem broker'}")  # fmt: skip
    print(f"requests           {requests} in {elapsed:.1f} s = {requests / elapsed:.0f} req/s; errors {errors} "
          f"(by status: {dict(sorted(statuses.items()))})")  # fmt: skip
    print(f"samples            {len(acknowledged)} acknowledged = {len(acknowledged) / elapsed:.0f} samples/s; "
          f"labels {len(labelled)}")  # fmt: skip
    for kind, values in latency.items():
        print(f"{kind:<18} p50 {statistics.median(values) * 1000:.0f} ms, p99 {percentile(values, 0.99) * 1000:.0f} ms"
              f" over {len(values)} requests")  # fmt: skip
    print(f"checks             {checker.statuses[201]} run through the API during the load "
          f"(p99 {percentile(checker.latencies, 0.99) * 1000:.0f} ms); "
          f"{QualityCheck.objects.filter(model__name=MODEL, state='done').count()} stored done")  # fmt: skip
    print(f"retries            {retried} batches sent twice: {duplicates} samples reported as duplicates")
    exact = sample_ids == acknowledged and sample_rows == len(acknowledged) and accepted == sample_rows
    labels_ok = labelled <= label_ids and label_rows == len(label_ids)
    print(f"stored once        samples: {sample_rows} rows, {len(sample_ids)} distinct, "
          f"{len(acknowledged - sample_ids)} acknowledged missing, {len(sample_ids - acknowledged)} unacknowledged "
          f"stored -> {'OK' if exact else 'MISMATCH'}; labels: {label_rows} rows -> {'OK' if labels_ok else 'MISMATCH'}")  # fmt: skip
    return 0 if exact and labels_ok and errors == 0 and checker.statuses[201] > 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
