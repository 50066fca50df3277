"""Retraining benchmark: a concept-drift stream replayed through the API, three ways.

    python bench/retrain.py            # 8,000 samples, two abrupt concept changes
    python bench/retrain.py --quick    # 5,000 samples, one change

The stream: x1, x2 ~ N(0, 1), a categorical segment, 5% label noise; the concept is
"yes when x1 + x2 > 0", switching to "x1 - x2 > 0" at sample 2,000 and to "x2 > 0.5·x1" at 5,000.
Samples go through the ingestion API in batches of 200, their labels right after. Every batch
the check that celery-beat would dispatch runs (last 600 samples); an open accuracy alert with
auto-retrain on becomes a job (the policy's baseline is fixed at the first champion's reference
accuracy, so a challenger trained on a mix of concepts cannot lower the bar) (`jobs_from_alerts`, the beat tick) that runs in this process
(`job_run`, the task's service call: estimator plan, training, gate, promotion); the serving
side then downloads the champion through the API and predicts with it.

Compared on the same stream, same recipe, same data:
- frozen: the initial champion forever;
- ADWIN refit: river's ADWIN (delta=0.002) on the 0/1 error stream; at each detection the same
  recipe is refit on the newest 600 labelled samples and swapped in at once (no gate).
Printed: accuracy over the last 2,000 samples, number of retrains, time from alert (detection)
to promotion (swap). Then the demo model's estimated vs measured peak memory and training time.

Uses its own database: SQLite in a temporary folder, or `<name>_retrain` when DATABASE_URL is set.
"""

import argparse
import os
import shutil
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _pg import admin_api_client, bench_database_url, ensure_database  # noqa: E402  (also puts platform/ on sys.path)

BATCH = 200
WINDOW = 600
CLASSES = ["no", "yes"]
FEATURES = {"x1": "numerical", "x2": "numerical", "segment": "categorical"}
LAST = 2000


def concept_at(i: int, changes: list[int]) -> int:
    return sum(i >= c for c in changes)


def stream(n: int, changes: list[int], seed: int = 0) -> tuple[pd.DataFrame, list[str]]:
    rng = np.random.default_rng(seed)
    x1, x2 = rng.normal(size=n), rng.normal(size=n)
    segment = rng.choice(["a", "b", "c"], n)
    concept = np.array([concept_at(i, changes) for i in range(n)])
    truth = np.select([concept == 0, concept == 1], [x1 + x2 > 0, x1 - x2 > 0], x2 > 0.5 * x1)
    truth = np.where(rng.random(n) < 0.05, ~truth, truth)
    frame = pd.DataFrame({"x1": x1.round(4), "x2": x2.round(4), "segment": segment})
    return frame, [CLASSES[int(t)] for t in truth]


def django_setup(var_dir: str) -> None:
    os.environ["DRIFTWATCH_VAR_DIR"] = var_dir
    os.environ.pop("DRIFTWATCH_MEDIA_ROOT", None)
    os.environ["DRIFTWATCH_DEBUG"] = "0"
    os.environ.setdefault("SECRET_KEY", "bench-" + uuid.uuid4().hex)
    os.environ["DJANGO_SETTINGS_MODULE"] = "driftwatch.settings"
    if os.environ.get("DATABASE_URL"):
        os.environ["DATABASE_URL"] = bench_database_url(suffix="_retrain")
        ensure_database(os.environ["DATABASE_URL"])
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", interactive=False, verbosity=0)


def rows(frame: pd.DataFrame) -> list[dict[str, Any]]:
    return [
        {k: (v.item() if hasattr(v, "item") else v) for k, v in r.items()} for r in frame.to_dict("records")
    ]


def initial_champion(frame: pd.DataFrame, labels: list[str]) -> Any:
    from workers.training import engine
    from workers.training.recipes import TABULAR_CLASSIFICATION

    schema = engine.make_schema("classification", FEATURES, CLASSES)
    prepared = engine.prepare(TABULAR_CLASSIFICATION, schema, frame, labels)
    return engine.train(TABULAR_CLASSIFICATION, prepared, engine.TrainingPlan(batch_size=256)).bundle


def register(client: Any, name: str, bundle: Any, ref: pd.DataFrame, ref_labels: list[str]) -> None:
    import json

    from django.core.files.uploadedfile import SimpleUploadedFile

    from monitoring.models import MonitoringPolicy
    from registry.models import RegisteredModel
    from retraining.models import RetrainPolicy
    from workers.training.artifacts import Predictor, bundle_to_bytes

    body = {"name": name, "task": "classification", "classes": CLASSES,
            "features": [{"name": n, "type": t} for n, t in FEATURES.items()]}  # fmt: skip
    assert client.post("/api/v1/models", body, format="json").status_code == 201
    upload = {"artifact": SimpleUploadedFile("model.safetensors", bundle_to_bytes(bundle)),
              "config": json.dumps({"recipe": bundle.recipe.to_dict()}), "champion": "true"}  # fmt: skip
    assert client.post(f"/api/v1/models/{name}/versions", upload, format="multipart").status_code == 201
    predictions, proba = Predictor(bundle).predict(ref)
    target = float(np.mean([p == y for p, y in zip(predictions, ref_labels, strict=True)]))
    reference = [
        {
            "features": f,
            "label": y,
            "prediction": p,
            "probabilities": dict(zip(CLASSES, map(float, q), strict=True)),
        }
        for f, y, p, q in zip(rows(ref), ref_labels, predictions, proba, strict=True)
    ]
    assert (
        client.post(f"/api/v1/models/{name}/reference", {"rows": reference}, format="json").status_code == 201
    )
    model = RegisteredModel.objects.get(name=name)
    MonitoringPolicy.objects.update_or_create(
        model=model,
        defaults={"window_kind": "samples", "window_size": WINDOW, "min_samples": 200, "min_labels": 200,
                  "tolerance": 0.06, "cooldown_minutes": 0, "auto_retrain": True, "baseline": target},
    )  # fmt: skip
    RetrainPolicy.objects.update_or_create(
        model=model,
        defaults={"max_training_samples": WINDOW, "min_training_samples": 300, "cooldown_minutes": 0},
    )


@dataclass
class Outcome:
    correct: list[bool] = field(default_factory=list)
    retrains: int = 0
    latencies: list[float] = field(default_factory=list)

    def last_accuracy(self) -> float:
        return float(np.mean(self.correct[-LAST:]))


def run_frozen(bundle: Any, frame: pd.DataFrame, labels: list[str]) -> Outcome:
    from workers.training.artifacts import Predictor

    predictions = Predictor(bundle).predict(frame)[0]
    return Outcome(correct=[p == y for p, y in zip(predictions, labels, strict=True)])


def run_adwin(bundle: Any, frame: pd.DataFrame, labels: list[str]) -> Outcome:
    from river.drift import ADWIN

    from workers.training import engine
    from workers.training.artifacts import Predictor

    detector, predictor, out = ADWIN(delta=0.002), Predictor(bundle), Outcome()
    for start in range(0, len(frame), BATCH):
        part, truth = frame.iloc[start : start + BATCH], labels[start : start + BATCH]
        predictions = predictor.predict(part)[0]
        refit = False
        for p, y in zip(predictions, truth, strict=True):
            out.correct.append(p == y)
            detector.update(0.0 if p == y else 1.0)
            refit = refit or detector.drift_detected
        end = start + len(part)
        if refit and end >= 300:
            began = time.perf_counter()
            lo = max(0, end - WINDOW)
            prepared = engine.prepare(bundle.recipe, bundle.schema, frame.iloc[lo:end], labels[lo:end])
            plan = engine.TrainingPlan(batch_size=bundle.recipe.max_batch_size)
            predictor = Predictor(engine.train(bundle.recipe, prepared, plan).bundle)
            out.retrains += 1
            out.latencies.append(time.perf_counter() - began)
    return out


def run_ours(
    client: Any, name: str, frame: pd.DataFrame, labels: list[str], t0: datetime
) -> tuple[Outcome, list[Any]]:
    from monitoring.checks import quality_check_run
    from monitoring.models import MonitoringPolicy
    from monitoring.window import scheduled_window
    from retraining.execution import job_run
    from retraining.models import Decision, RetrainJob
    from retraining.requests import jobs_from_alerts
    from workers.training.artifacts import Predictor

    out, serving, jobs = Outcome(), None, []
    predictor = None
    for start in range(0, len(frame), BATCH):
        champion = client.get(f"/api/v1/models/{name}/champion").json()
        if champion["version"] != serving:  # the serving side's poll: download the new champion
            raw = b"".join(client.get(f"/api/v1/models/{name}/champion/artifact").streaming_content)
            predictor, serving = Predictor.from_bytes(raw), champion["version"]
        assert predictor is not None
        part, truth = frame.iloc[start : start + BATCH], labels[start : start + BATCH]
        predictions, proba = predictor.predict(part)
        samples = [
            {"id": f"s{start + i}", "timestamp": (t0 + timedelta(seconds=start + i)).isoformat(), "features": f,
             "prediction": p, "probabilities": dict(zip(CLASSES, map(float, q), strict=True))}
            for i, (f, p, q) in enumerate(zip(rows(part), predictions, proba, strict=True))
        ]  # fmt: skip
        assert (
            client.post(f"/api/v1/models/{name}/predictions", {"samples": samples}, format="json").status_code
            == 200
        )
        body = {"labels": [{"id": f"s{start + i}", "label": y} for i, y in enumerate(truth)]}
        assert client.post(f"/api/v1/models/{name}/labels", body, format="json").status_code == 200
        out.correct += [p == y for p, y in zip(predictions, truth, strict=True)]
        policy = MonitoringPolicy.objects.get(model__name=name)
        end = t0 + timedelta(seconds=start + len(part))
        quality_check_run(model_id=policy.model_id, window=scheduled_window(policy, end))
        alerted = time.perf_counter()
        if jobs_from_alerts():  # the beat tick
            job = RetrainJob.objects.filter(model_id=policy.model_id).order_by("-pk").first()
            assert job is not None
            job_run(job_id=job.pk)  # what the training worker's task runs
            job.refresh_from_db()
            jobs.append(job)
            if job.decision == Decision.PROMOTED:
                out.retrains += 1
                out.latencies.append(time.perf_counter() - alerted)
    return out, jobs


def demo_memory() -> None:
    from workers.demo import DEMO_CLASSES, DEMO_FEATURES, demo_frame
    from workers.training import engine
    from workers.training.measure import available_memory_bytes
    from workers.training.recipes import TABULAR_CLASSIFICATION

    frame, labels = demo_frame(1000, drift=0.5, seed=3)
    schema = engine.make_schema("classification", DEMO_FEATURES, DEMO_CLASSES)
    prepared = engine.prepare(TABULAR_CLASSIFICATION, schema, frame, labels)
    began = time.perf_counter()
    plan = engine.plan_training(TABULAR_CLASSIFICATION, prepared, budget_bytes=available_memory_bytes())
    planning = time.perf_counter() - began
    result = engine.train(TABULAR_CLASSIFICATION, prepared, plan)
    est, measured = plan.estimated_bytes or 0, result.measured_peak_bytes or 0
    print("== demo model (tabular-classification MLP, 1,000 rows, CPU) ==")
    print(f"plan                : batch {plan.batch_size} x {plan.accumulation_steps}, {plan.precision}, "
          f"{plan.traces} traces in {planning:.2f} s")  # fmt: skip
    print(f"estimated peak      : {est:,} bytes")
    print(f"measured peak       : {measured:,} bytes  (error {100 * (est - measured) / measured:+.2f}%)")
    print(f"training            : {result.epochs_run} epochs, {result.steps} steps, wall {result.wall_seconds:.2f} s, "
          f"CPU {result.cpu_seconds:.2f} s, energy {result.energy_joules if result.energy_joules is not None else 'n/a (no counter)'}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    n, changes = (5000, [2000]) if args.quick else (8000, [2000, 5000])
    var_dir = tempfile.mkdtemp(prefix="driftwatch-retrain-")
    try:
        django_setup(var_dir)
        frame, labels = stream(n, changes, seed=1)
        ref, ref_labels = stream(1600, [], seed=2)
        bundle = initial_champion(ref.iloc[:1000], ref_labels[:1000])
        client = admin_api_client("bench-retrain")
        t0 = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=n + 600)
        register(client, "bench-concept", bundle, ref.iloc[1000:], ref_labels[1000:])
        began = time.perf_counter()
        ours, jobs = run_ours(client, "bench-concept", frame, labels, t0)
        ours_s = time.perf_counter() - began
        frozen = run_frozen(bundle, frame, labels)
        adwin = run_adwin(bundle, frame, labels)
        print(f"== concept-drift stream: {n:,} samples, concept changes at {changes}, batches of {BATCH} ==")
        print(f"{'':22}{'acc last 2,000':>16}{'retrains':>10}{'alert->promotion (s)':>22}")
        for label, out in (("frozen", frozen), ("ADWIN refit", adwin), ("driftwatch", ours)):
            lat = f"{np.median(out.latencies):.2f} (median)" if out.latencies else "-"
            print(f"{label:22}{out.last_accuracy():>16.4f}{out.retrains:>10}{lat:>22}")
        print(
            f"driftwatch jobs: {[(j.pk, j.state, j.decision, round(j.gate.get('improvement') or 0, 3)) for j in jobs]}"
        )
        print(f"driftwatch replay wall time: {ours_s:.1f} s (checks, jobs and API calls in one process)")
        print(
            "alert->promotion is in-process: a deployment adds up to one beat tick (60 s) and the queue wait."
        )
        for job in jobs:
            print(f"  job #{job.pk}: plan batch {job.plan.get('batch_size')}, estimated {job.estimated_peak_bytes:,} B, "
                  f"measured {job.measured_peak_bytes:,} B, training {job.wall_seconds:.2f} s")  # fmt: skip
        demo_memory()
    finally:
        shutil.rmtree(var_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
