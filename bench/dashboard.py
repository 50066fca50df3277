"""Benchmark: server-side render time of the dashboard pages for one model with 1,000,000 stored
samples (all labelled) and 2,000 checks (one every 5 minutes, about a week).

    DATABASE_URL=postgres://… python bench/dashboard.py [--repeat 40]

Runs on a private `<db>_dashbench` PostgreSQL database; the data are made once with bulk
INSERT … SELECT generate_series (seconds, not minutes) and reused by later runs. Each page is
rendered through Django's test client (no network, no browser): p50 and p95 per page, the
number of SQL queries, and whether any query read the raw samples or labels. The reference run
in the same process is the login page (a template render with no model data), so the ratios
say what the data cost. Target: the model page under 200 ms at p95 (issue 21).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _pg import bench_database_url, django_on  # noqa: E402

MODEL = "bench-dashboard"
N_SAMPLES = 1_000_000
N_CHECKS = 2_000
CHECK_EVERY = timedelta(minutes=5)
# Yesterday's noon: the newest check and sample, in the past whatever day the bench runs.
END = datetime.now(UTC).replace(hour=12, minute=0, second=0, microsecond=0) - timedelta(days=1)
FEATURES = [("x1", "numerical"), ("x2", "numerical"), ("x3", "numerical"), ("segment", "categorical")]
TARGET_MS = 200.0  # issue 21 (it was 300 before)


def _drift_column(rng: random.Random, name: str, kind: str, drifted: bool) -> dict[str, Any]:
    method = ("ks", "K-S p_value") if kind == "numerical" else ("chisquare", "chi-square p_value")
    score = rng.uniform(0.0, 0.04) if drifted else rng.uniform(0.06, 0.9)
    return {
        "column_type": kind,
        "method": method[0],
        "method_display": method[1],
        "score": score,
        "threshold": 0.05,
        "drifted": drifted,
        "n_reference": 2000,
        "n_current": 500,
        "note": None,
        "higher_is_drift": False,  # both tests give p-values; the engine stores the direction
    }


def _check_fields(rng: random.Random, i: int) -> dict[str, Any]:
    """A finished check as the monitoring service stores it (same JSON shapes)."""
    late = i > N_CHECKS * 0.8  # the last fifth drifts and loses accuracy
    acc = rng.gauss(0.78 if late else 0.9, 0.01)
    drifted = {n: late and n in ("x1", "segment") for n, _ in FEATURES}
    share = sum(drifted.values()) / len(FEATURES)
    return {
        "n_samples": 500,
        "n_labelled": 500,
        "metrics": {
            "n": 500,
            "accuracy": acc,
            "accuracy_ci": [acc - 0.03, acc + 0.03],
            "f1_macro": acc - 0.01,
            "f1_macro_ci": [acc - 0.04, acc + 0.02],
            "per_class": {
                c: {"precision": acc, "recall": acc, "f1": acc, "support": 250} for c in ("0", "1")
            },
            "confusion_matrix": [[225, 25], [25, 225]],
        },
        "estimated": {
            "metric": "accuracy",
            "method": "CBPE",
            "value": acc + 0.01,
            "ci": [acc - 0.02, acc + 0.04],
            "realised": acc,
            "error": 0.01,
            "available": True,
        },
        "labels": {"n": 500, "n_labelled": 500, "label_coverage": 1.0, "label_delay_median_s": 60.0},
        "drift": {
            "columns": {n: _drift_column(rng, n, k, drifted[n]) for n, k in FEATURES},
            "share": share,
            "drift_share": 0.5,
            "dataset_drift": share >= 0.5,
        },
        "prediction_drift": _drift_column(rng, "prediction", "categorical", late),
        "data_quality": {"broken_feed": False, "reasons": [], "columns": {}},
        "decisions": {
            "metric": "accuracy",
            "value": acc,
            "baseline": 0.9,
            "tolerance": 0.05,
            "accuracy_drop": acc < 0.85,
            "data_drift": share >= 0.5,
            "prediction_drift": late,
            "estimated_accuracy_drop": False,
            "data_quality": False,
        },
    }


def make_data() -> tuple[Any, float]:
    """The bench model with its samples, labels and checks; reused when already complete."""
    from django.db import connection

    from monitoring.models import MonitoringPolicy, PredictionSample, QualityCheck
    from registry.models import RegisteredModel
    from registry.services import model_register

    model = RegisteredModel.objects.filter(name=MODEL).first()
    if (
        model is not None
        and PredictionSample.objects.filter(model=model).count() == N_SAMPLES
        and QualityCheck.objects.filter(model=model).count() == N_CHECKS
    ):
        return model, 0.0
    t0 = time.perf_counter()
    RegisteredModel.objects.filter(name=MODEL).delete()
    model = model_register(
        data={
            "name": MODEL,
            "task": "classification",
            "classes": [0, 1],
            "features": [{"name": n, "type": t} for n, t in FEATURES],
        }
    )
    MonitoringPolicy.objects.update_or_create(
        model=model, defaults={"window_kind": "samples", "window_size": 500, "check_every_minutes": 5}
    )
    span = (CHECK_EVERY * N_CHECKS).total_seconds()
    with connection.cursor() as cursor:
        cursor.execute(
            # The index rows alone: the pages read no payload (no part is written).
            """INSERT INTO monitoring_predictionsample (model_id, sample_id, timestamp, received_at, prediction)
               SELECT %s, 's' || g, %s::timestamptz - make_interval(secs => %s * (1 - g::float8 / %s)),
                      %s::timestamptz, to_jsonb(g %% 2)
               FROM generate_series(1, %s) AS g""",
            [model.pk, END, span, N_SAMPLES, END, N_SAMPLES],
        )
        cursor.execute(
            # Fed to the detector already: no backlog rows (monitoring.models.DetectorBacklog).
            """INSERT INTO monitoring_groundtruth (model_id, sample_id, label, received_at)
               SELECT %s, 's' || g, to_jsonb(g %% 2), %s::timestamptz
               FROM generate_series(1, %s) AS g""",
            [model.pk, END, N_SAMPLES],
        )
    rng = random.Random(7)
    now = datetime.now(UTC)
    checks = []
    for i in range(N_CHECKS):
        end = END - CHECK_EVERY * (N_CHECKS - 1 - i)
        checks.append(
            QualityCheck(
                model=model,
                window_spec="500samples",
                window_start=end - CHECK_EVERY,
                window_end=end,
                state="done",
                started_at=now,
                finished_at=now,
                **_check_fields(rng, i),
            )
        )
    QualityCheck.objects.bulk_create(checks, batch_size=500)
    with connection.cursor() as cursor:
        cursor.execute(
            "ANALYZE monitoring_predictionsample; ANALYZE monitoring_groundtruth; ANALYZE monitoring_qualitycheck"
        )
    return model, time.perf_counter() - t0


def time_page(client: Any, path: str, repeat: int) -> dict[str, Any]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    for _ in range(3):  # warm-up: template and query caches
        assert client.get(path).status_code == 200, path
    timings = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        response = client.get(path)
        timings.append((time.perf_counter() - t0) * 1000)
        assert response.status_code == 200, path
    with CaptureQueriesContext(connection) as queries:
        client.get(path)
    raw = any(
        "monitoring_predictionsample" in q["sql"] or "monitoring_groundtruth" in q["sql"] for q in queries
    )
    q = statistics.quantiles(timings, n=20, method="inclusive")
    return {"p50": statistics.median(timings), "p95": q[18], "queries": len(queries), "raw": raw}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, default=40, help="timed renders per page")
    args = parser.parse_args()
    django_on(bench_database_url(suffix="_dashbench"))
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.test import Client

    from monitoring.models import QualityCheck

    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "testserver"]
    model, made = make_data()
    print(
        f"data: {N_SAMPLES:,} samples + labels, {N_CHECKS:,} checks for {MODEL!r}"
        + (f" (made in {made:.1f} s)" if made else " (reused)")
    )
    user, _ = get_user_model().objects.get_or_create(username="bench-staff", defaults={"is_staff": True})
    client = Client()
    client.force_login(user)
    check = QualityCheck.objects.filter(model=model).order_by("-window_end").first()
    assert check is not None
    anonymous = Client()
    reference = time_page(anonymous, "/login/", args.repeat)
    pages = {
        "home": "/",
        "model (default: last week)": f"/models/{MODEL}/",
        "model ?range=24h": f"/models/{MODEL}/?range=24h",
        "model ?range=all": f"/models/{MODEL}/?range=all",
        "check": f"/checks/{check.pk}/",
        "alerts": "/alerts/",
    }
    print(f"{'page':30} {'p50 ms':>8} {'p95 ms':>8} {'queries':>8} {'raw rows':>9} {'p95/login':>10}")
    print(
        f"{'login (reference)':30} {reference['p50']:8.1f} {reference['p95']:8.1f} {reference['queries']:8d} {'no':>9} {1:10.1f}"
    )
    results = {}
    for name, path in pages.items():
        r = results[name] = time_page(client, path, args.repeat)
        print(
            f"{name:30} {r['p50']:8.1f} {r['p95']:8.1f} {r['queries']:8d} {'YES' if r['raw'] else 'no':>9} "
            f"{r['p95'] / reference['p95']:10.1f}"
        )
    model_p95 = max(r["p95"] for n, r in results.items() if n.startswith("model"))
    raw = any(r["raw"] for r in results.values())
    ok = model_p95 < TARGET_MS and not raw
    print(
        f"model page p95 (worst range) {model_p95:.1f} ms = {model_p95 / TARGET_MS:.2f} of the {TARGET_MS:.0f} ms "
        f"target; raw samples read: {'yes' if raw else 'no'} → {'MET' if ok else 'NOT MET'}"
    )


if __name__ == "__main__":
    main()
