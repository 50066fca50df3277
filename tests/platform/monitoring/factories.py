"""Builds a monitored model with a reference set and streams of (optionally drifted) traffic."""

from datetime import datetime, timedelta
from typing import Any

import numpy as np
import orjson
from django.db import connection

from monitoring.checks import check_compute
from monitoring.models import BacklogBatch, DetectorBacklog, GroundTruth, MonitoringPolicy, PredictionSample
from monitoring.reference import reference_state
from monitoring.segments import segments_compute
from monitoring.sequential import batch_entries
from monitoring.services import labels_ingest, predictions_ingest
from monitoring.store.migrate import legacy_columns
from monitoring.window import Window
from registry.models import RegisteredModel
from registry.services import model_register, reference_upload

FEATURES = {"x1": "numerical", "x2": "numerical", "segment": "categorical"}


def rows(n: int, *, seed: int, shift: float = 0.0, flip: float = 0.1) -> list[dict[str, Any]]:
    """Samples whose prediction is right with probability 1-flip; shift moves the inputs."""
    rng = np.random.default_rng(seed)
    x1 = rng.normal(shift, 1, n)
    x2 = rng.normal(0, 1, n)
    segment = rng.choice(["a", "b", "c"], n, p=[0.5, 0.3, 0.2] if shift == 0 else [0.2, 0.3, 0.5])
    truth = (x1 + x2 > 0).astype(int)
    wrong = rng.random(n) < flip
    predicted = np.where(wrong, 1 - truth, truth)
    confidence = np.clip(rng.normal(1 - flip, 0.05, n), 0.5, 0.99)
    out = []
    for i in range(n):
        p1 = confidence[i] if predicted[i] == 1 else 1 - confidence[i]
        out.append(
            {
                "features": {"x1": float(x1[i]), "x2": float(x2[i]), "segment": str(segment[i])},
                "label": int(truth[i]),
                "prediction": int(predicted[i]),
                "probabilities": {"0": float(1 - p1), "1": float(p1)},
            }
        )
    return out


def monitored_model(
    name: str = "sea", *, reference_rows: int = 2000, reference_flip: float = 0.1, **policy: Any
) -> RegisteredModel:
    model = model_register(
        data={
            "name": name,
            "task": "classification",
            "classes": [0, 1],
            "features": [{"name": n, "type": t} for n, t in FEATURES.items()],
        }
    )
    reference_upload(model=model, rows=rows(reference_rows, seed=1, flip=reference_flip))
    defaults: dict[str, Any] = {
        "window_kind": "samples",
        "window_size": 1000,
        "min_samples": 200,
        "min_labels": 200,
        "tolerance": 0.1,
        "cooldown_minutes": 0,
    }
    MonitoringPolicy.objects.update_or_create(model=model, defaults={**defaults, **policy})
    return model


def regression_rows(rng: np.random.Generator, n: int, shift: float = 0.0) -> list[dict[str, Any]]:
    """A regressor's rows: two numbers (x shifted by ``shift``, z missing every 11th row) and a
    category; the label 2x + z, the prediction off by more where x is larger; no probabilities."""
    x, z = rng.normal(shift, 1, n), rng.normal(0, 1, n)
    truth = 2 * x + z
    prediction = truth + rng.normal(0, 0.1 + np.clip(x, 0, None), n)
    colour = rng.choice(["red", "green", "blue"], n)
    return [
        {
            "features": {"x": float(x[i]), "z": None if i % 11 == 0 else float(z[i]), "colour": colour[i]},
            "prediction": float(prediction[i]),
            "probabilities": None,
            "label": float(truth[i]),
        }
        for i in range(n)
    ]


def regressor(name: str, rng: np.random.Generator, *, reference_rows: int) -> RegisteredModel:
    """A regressor over ``regression_rows``' features, its reference labelled (DLE's loss model is
    fitted on it)."""
    model = model_register(
        data={
            "name": name,
            "task": "regression",
            "features": [
                {"name": "x", "type": "numerical"},
                {"name": "z", "type": "numerical"},
                {"name": "colour", "type": "categorical"},
            ],
        }
    )
    reference_upload(model=model, rows=regression_rows(rng, reference_rows))
    return model


def send(
    model: RegisteredModel,
    data: list[dict[str, Any]],
    *,
    start: datetime,
    prefix: str,
    labelled: bool = True,
    step: timedelta = timedelta(seconds=1),
) -> None:
    samples = [
        {
            "id": f"{prefix}{i}",
            "timestamp": (start + i * step).isoformat(),
            "features": r["features"],
            "prediction": r["prediction"],
            "probabilities": r["probabilities"],
        }
        for i, r in enumerate(data)
    ]
    predictions_ingest(model=model, body={"samples": samples})
    if labelled:
        labels_ingest(
            model=model,
            body={"labels": [{"id": f"{prefix}{i}", "label": r["label"]} for i, r in enumerate(data)]},
        )


def json_rows_send(
    model: RegisteredModel,
    data: list[dict[str, Any]],
    *,
    start: datetime,
    prefix: str,
    step: timedelta = timedelta(seconds=1),
) -> None:
    """``send``, but stored as an install from before the columnar store holds them: index rows
    without a part, their payload in the JSON columns that migration 0030 keeps and 0031 drops
    (added back here, inside the test's transaction), labelled."""
    json_columns_add()
    PredictionSample.objects.bulk_create(
        PredictionSample(
            model=model,
            sample_id=f"{prefix}{i}",
            timestamp=start + i * step,
            received_at=start,
            prediction=r["prediction"],
        )
        for i, r in enumerate(data)
    )
    json = "%s::jsonb" if connection.vendor == "postgresql" else "%s"
    with connection.cursor() as cursor:
        cursor.executemany(
            f"UPDATE monitoring_predictionsample SET features = {json}, probabilities = {json} "
            "WHERE model_id = %s AND sample_id = %s",
            [
                (
                    orjson.dumps(r["features"]).decode(),
                    orjson.dumps(r["probabilities"]).decode(),
                    model.pk,
                    f"{prefix}{i}",
                )
                for i, r in enumerate(data)
            ],
        )
    labels_ingest(
        model=model,
        body={"labels": [{"id": f"{prefix}{i}", "label": r["label"]} for i, r in enumerate(data)]},
    )


def json_columns_add() -> None:
    """The index table's JSON payload columns, as migration 0030 leaves them (nullable)."""
    if legacy_columns():
        return
    kind = "jsonb" if connection.vendor == "postgresql" else "text"
    with connection.cursor() as cursor:
        for name in ("features", "probabilities"):
            cursor.execute(f"ALTER TABLE monitoring_predictionsample ADD COLUMN {name} {kind} NULL")


def unfed(model: RegisteredModel) -> list[str]:
    """The sample ids of the model's labels its detector has not been fed yet, sorted: those
    waiting for their prediction and those in its batches."""
    waiting = DetectorBacklog.objects.filter(model=model).values_list("label_id", flat=True)
    batched = [batch_entries(batch).label_ids for batch in BacklogBatch.objects.filter(model=model)]
    label_ids = [*waiting, *np.concatenate([np.empty(0, np.int64), *batched]).tolist()]
    assert len(set(label_ids)) == len(label_ids), "a label queued twice"
    return sorted(GroundTruth.objects.filter(pk__in=label_ids).values_list("sample_id", flat=True))


def check_with_segments(model: RegisteredModel, window: Window) -> dict[str, Any]:
    """A check's result over a loaded window and its segments' (``result``, ``segments``), as a
    stored check computes them, by the model's policy and active reference."""
    policy = MonitoringPolicy.objects.get(model=model)
    reference = reference_state(model=model)
    result = check_compute(model=model, policy=policy, window=window, reference=reference)
    segments = segments_compute(
        compute=check_compute, model=model, policy=policy, window=window, reference=reference
    )
    return {"result": result, "segments": segments}
