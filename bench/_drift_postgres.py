"""bench/drift.py's PostgreSQL section: one scheduled check of a 100,000-sample window, end to end
(rows read from PostgreSQL → DataFrame → metrics, estimate, drift, data quality → stored row)."""

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pandas as pd
from _pg import bench_database_url, django_on

MODEL = "bench-drift-check"


def _samples(
    frame: pd.DataFrame, rng: np.random.Generator, start: datetime, prefix: str
) -> list[dict[str, Any]]:
    p1 = rng.uniform(0.05, 0.95, len(frame))
    records = frame.to_dict("records")
    return [
        {
            "id": f"{prefix}{i}",
            "timestamp": (start + timedelta(milliseconds=10 * i)).isoformat(),
            "features": {k: (None if isinstance(v, float) and v != v else v) for k, v in rec.items()},
            "prediction": int(p1[i] > 0.5),
            "probabilities": {"0": float(1 - p1[i]), "1": float(p1[i])},
        }
        for i, rec in enumerate(records)
    ]


def _setup(make_frame: Any, columns: dict[str, str], n_current: int) -> tuple[Any, datetime, datetime]:
    from monitoring.services import labels_ingest, predictions_ingest
    from registry.models import RegisteredModel
    from registry.services import model_register, reference_upload

    RegisteredModel.objects.filter(name=MODEL).delete()
    model = model_register(
        data={
            "name": MODEL,
            "task": "classification",
            "classes": [0, 1],
            "features": [{"name": n, "type": t} for n, t in columns.items()],
        }
    )
    rng = np.random.default_rng(0)
    reference = _samples(make_frame(1, 1_000, False), rng, datetime.now(UTC), "r")
    keep = ("features", "prediction", "probabilities")
    reference_upload(
        model=model, rows=[{**{k: s[k] for k in keep}, "label": int(rng.random() < 0.5)} for s in reference]
    )
    start = datetime.now(UTC) - timedelta(hours=2)
    current = make_frame(2, n_current, True)
    for offset in range(0, n_current, 10_000):
        chunk = _samples(
            current.iloc[offset : offset + 10_000].reset_index(drop=True),
            rng,
            start + timedelta(milliseconds=10 * offset),
            f"c{offset}-",
        )
        predictions_ingest(model=model, body={"samples": chunk})
        # Half of the window is labelled, so realised metrics run too.
        labels_ingest(
            model=model, body={"labels": [{"id": s["id"], "label": s["prediction"]} for s in chunk[::2]]}
        )
    return model, start, start + timedelta(milliseconds=10 * n_current + 1)


def bench_postgres_check(make_frame: Any, columns: dict[str, str], n_current: int = 100_000) -> None:
    django_on(bench_database_url())
    from django.db import connection

    from monitoring.checks import check_compute, quality_check_run
    from monitoring.reference import reference_state
    from monitoring.selectors import policy_for
    from monitoring.window import range_window, window_load

    model, start, end = _setup(make_frame, columns, n_current)
    policy = policy_for(model)
    t0 = time.perf_counter()
    reference = reference_state(model=model)  # first use builds and stores the summary
    t_summary = time.perf_counter() - t0
    t0 = time.perf_counter()
    check = quality_check_run(model_id=model.pk, window=range_window(start, end))
    t_total = time.perf_counter() - t0
    t0 = time.perf_counter()
    window = window_load(model=model, start=start, end=end)
    t_load = time.perf_counter() - t0
    t0 = time.perf_counter()
    check_compute(model=model, policy=policy, window=window, reference=reference)
    t_compute = time.perf_counter() - t0
    assert check is not None
    check.refresh_from_db()
    print(
        f"\n== scheduled check of a {n_current:,}-sample window read from PostgreSQL ({connection.vendor}) =="
    )
    print(f"reference summary (once per reference) : {t_summary:8.3f} s")
    print(
        f"end-to-end check (quality_check_run)   : {t_total:8.3f} s  state={check.state} "
        f"samples={check.n_samples:,} labelled={check.n_labelled:,} drift share={check.drift.get('share')}"
    )
    print(f"  of which loading the window (1 query): {t_load:8.3f} s  ({t_load / t_total:.0%})")
    print(
        f"  of which computing everything        : {t_compute:8.3f} s  (metrics, CBPE, drift, data quality)"
    )
