"""A retrainable tabular model whose concept drifts: the frozen champion drops to about chance,
a challenger trained on the new concept recovers."""

from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pandas as pd
from django.core.files.base import ContentFile

from monitoring.models import MonitoringPolicy
from monitoring.services import labels_ingest, predictions_ingest
from registry.models import ModelVersion, RegisteredModel
from registry.services import model_register, reference_upload, version_create
from retraining.execution import job_run
from retraining.models import RetrainJob, RetrainPolicy
from retraining.requests import job_request
from workers.training import engine
from workers.training.artifacts import Predictor, bundle_to_bytes
from workers.training.recipes import TABULAR_CLASSIFICATION, Recipe

FEATURES = {"x1": "numerical", "x2": "numerical", "segment": "categorical"}
CLASSES = ["no", "yes"]
RECIPE = replace(TABULAR_CLASSIFICATION, epochs=12, max_batch_size=128, early_stopping_patience=3)


def concept_frame(n: int, *, concept: int, seed: int, noise: float = 0.05) -> tuple[pd.DataFrame, list[str]]:
    """Concept 0: yes when x1 + x2 > 0; concept 1: yes when x1 - x2 > 0 (5% label noise)."""
    rng = np.random.default_rng(seed)
    x1, x2 = rng.normal(size=n), rng.normal(size=n)
    segment = rng.choice(["a", "b", "c"], n)
    truth = (x1 + x2 > 0) if concept == 0 else (x1 - x2 > 0)
    truth = np.where(rng.random(n) < noise, ~truth, truth)
    frame = pd.DataFrame({"x1": x1.round(4), "x2": x2.round(4), "segment": segment})
    return frame, [CLASSES[int(t)] for t in truth]


def rows_of(frame: pd.DataFrame) -> list[dict[str, Any]]:
    return [
        {k: (v.item() if hasattr(v, "item") else v) for k, v in r.items()} for r in frame.to_dict("records")
    ]


FrameOf = Callable[..., tuple[pd.DataFrame, list[str]]]  # (n, *, concept, seed) -> rows, labels


def retrainable_model(
    name: str = "concept",
    *,
    recipe: Recipe = RECIPE,
    champion_recipe: Recipe = RECIPE,
    features: dict[str, str] = FEATURES,
    frame_of: FrameOf = concept_frame,
    **policy: Any,
) -> RegisteredModel:
    """Registered, with an engine-trained champion (safetensors + ``recipe``) and its reference."""
    model = model_register(
        data={
            "name": name,
            "task": "classification",
            "classes": CLASSES,
            "features": [{"name": n, "type": t} for n, t in features.items()],
        }
    )
    frame, labels = frame_of(1500, concept=0, seed=1)
    schema = engine.make_schema("classification", features, CLASSES)
    prepared = engine.prepare(champion_recipe, schema, frame.iloc[:1000], labels[:1000])
    plan = engine.TrainingPlan(batch_size=min(128, champion_recipe.max_batch_size))
    result = engine.train(champion_recipe, prepared, plan)
    result.bundle.recipe = recipe  # what a retrain of this champion will use
    version_create(
        model=model,
        artifact=ContentFile(bundle_to_bytes(result.bundle), name="model.safetensors"),
        config={"recipe": recipe.to_dict()},
        champion=True,
    )
    predictions, proba = Predictor(result.bundle).predict(frame.iloc[1000:])
    reference_upload(model=model, rows=_scored(frame.iloc[1000:], labels[1000:], predictions, proba))
    defaults: dict[str, Any] = {"window_kind": "samples", "window_size": 600, "min_samples": 200,
                                "min_labels": 200, "tolerance": 0.1, "cooldown_minutes": 0}  # fmt: skip
    MonitoringPolicy.objects.update_or_create(model=model, defaults={**defaults, **policy})
    RetrainPolicy.objects.update_or_create(model=model, defaults={"min_training_samples": 200})
    return model


def _scored(
    frame: pd.DataFrame, labels: list[str], predictions: list[Any], proba: Any
) -> list[dict[str, Any]]:
    return [
        {
            "features": f,
            "label": y,
            "prediction": p,
            "probabilities": dict(zip(CLASSES, map(float, q), strict=True)),
        }
        for f, y, p, q in zip(rows_of(frame), labels, predictions, proba, strict=True)
    ]


def champion_predictor(model: RegisteredModel) -> Predictor:
    champion = ModelVersion.objects.get(model=model, status="champion")
    with champion.artifact.open("rb") as handle:
        return Predictor.from_bytes(handle.read())


def serve(
    model: RegisteredModel,
    n: int,
    *,
    concept: int,
    seed: int,
    start: datetime,
    prefix: str,
    step: timedelta = timedelta(seconds=1),
    predictor: Predictor | None = None,
    frame_of: FrameOf = concept_frame,
) -> float:
    """The champion (or ``predictor``) predicts n samples, then their labels arrive. Returns accuracy."""
    frame, labels = frame_of(n, concept=concept, seed=seed)
    predictor = predictor or champion_predictor(model)
    predictions, proba = predictor.predict(frame)
    samples = [
        {
            "id": f"{prefix}{i}",
            "timestamp": (start + i * step).isoformat(),
            "features": f,
            "prediction": p,
            "probabilities": dict(zip(CLASSES, map(float, q), strict=True)),
        }
        for i, (f, p, q) in enumerate(zip(rows_of(frame), predictions, proba, strict=True))
    ]
    predictions_ingest(model=model, body={"samples": samples})
    labels_ingest(
        model=model, body={"labels": [{"id": f"{prefix}{i}", "label": y} for i, y in enumerate(labels)]}
    )
    return float(np.mean([p == y for p, y in zip(predictions, labels, strict=True)]))


def drifted_model(*, recipe: Recipe = RECIPE, **policy: object) -> RegisteredModel:
    """Served 300 samples of concept 0, then 900 of concept 1, all labelled."""
    model = retrainable_model(recipe=recipe)
    t0 = datetime.now(UTC) - timedelta(hours=2)
    serve(model, 300, concept=0, seed=10, start=t0, prefix="old")
    serve(model, 900, concept=1, seed=11, start=t0 + timedelta(minutes=30), prefix="new")
    if policy:
        RetrainPolicy.objects.filter(model=model).update(**policy)
    return model


def run(model: RegisteredModel, **kwargs: Any) -> RetrainJob:
    job = job_request(model=model, trigger="api", **kwargs)
    job_run(job_id=job.pk)
    job.refresh_from_db()
    return job


def count_traces(monkeypatch: Any) -> list[int]:
    """Counts ``plan_batch_size`` calls (each traces the training step), calling the real one."""
    from workers.memory import planner

    calls: list[int] = []
    real = planner.plan_batch_size

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(planner, "plan_batch_size", counting)
    return calls
