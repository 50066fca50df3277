"""Seeds the demo: an admin login, a trained PyTorch churn classifier, its reference set, a token."""

import secrets
from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.core.files.base import ContentFile
from django.db import transaction

from core.models import Scope
from core.services import api_token_create
from monitoring.models import MonitoringPolicy, WindowKind
from registry.models import ModelVersion, RegisteredModel
from registry.services import model_register, reference_upload, version_create
from retraining.models import RetrainPolicy
from workers.demo import (
    DEMO_CLASSES,
    DEMO_FEATURES,
    DEMO_MODEL,
    TICKETS_CLASSES,
    TICKETS_FEATURES,
    TICKETS_MODEL,
    demo_frame,
    frame_rows,
    tickets_frame,
)
from workers.training import engine
from workers.training.artifacts import Predictor, bundle_to_bytes
from workers.training.recipes import TABULAR_CLASSIFICATION

DEMO_POLICY = {
    "window_kind": WindowKind.SAMPLES,
    "window_size": 1000,
    "check_every_minutes": 1,
    "min_samples": 200,
    "min_labels": 200,
    "cooldown_minutes": 10,
    "auto_retrain": True,
}
# Retrain on the newest 1,000 labelled samples (the drifted ones), at most every 3 minutes.
DEMO_RETRAIN_POLICY = {
    "max_training_samples": 1000,
    "min_training_samples": 300,
    "cooldown_minutes": 3,
}


# The ticket router's inputs drift where only the embedding and text tests look; the policy
# picks the calibrated permutation test for its embedding.
TICKETS_POLICY = {
    **{k: v for k, v in DEMO_POLICY.items() if k != "auto_retrain"},
    "embedding_drift_method": "mean_perm",
}


@dataclass(frozen=True)
class DemoSeed:
    admin_username: str
    admin_password: str | None  # None when the admin already existed (password unchanged)
    ingest_token: str
    created_model: bool
    read_token: str = ""  # the demo traffic polls and downloads the champion with it


def demo_admin_ensure(*, username: str = "admin") -> str | None:
    users = get_user_model().objects
    if users.filter(username=username).exists():
        return None
    password = secrets.token_urlsafe(12)
    users.create_superuser(username=username, email="admin@localhost", password=password)
    return password


def demo_model_ensure() -> bool:
    """Train and register the demo model once; a second run reuses it."""
    if RegisteredModel.objects.filter(name=DEMO_MODEL).exists():
        return False
    frame, labels = demo_frame(4000, seed=1)
    train, holdout = frame.iloc[:3000], frame.iloc[3000:]
    schema = engine.make_schema("classification", DEMO_FEATURES, DEMO_CLASSES)
    prepared = engine.prepare(TABULAR_CLASSIFICATION, schema, train, labels[:3000])
    plan = engine.TrainingPlan(batch_size=TABULAR_CLASSIFICATION.max_batch_size)
    bundle = engine.train(TABULAR_CLASSIFICATION, prepared, plan).bundle
    predicted, proba = Predictor(bundle).predict(holdout)
    assert proba is not None
    accuracy = sum(p == t for p, t in zip(predicted, labels[3000:], strict=True)) / len(predicted)
    with transaction.atomic():
        model = model_register(
            data={
                "name": DEMO_MODEL,
                "task": "classification",
                "classes": DEMO_CLASSES,
                "features": [{"name": n, "type": t} for n, t in DEMO_FEATURES.items()],
                "description": "Demo: PyTorch MLP predicting customer churn; its traffic drifts slowly.",
            }
        )
        version_create(
            model=model,
            artifact=ContentFile(bundle_to_bytes(bundle), name="model.safetensors"),
            champion=True,
            metrics={"accuracy": round(accuracy, 4)},
            source="demo seed",
            config={"recipe": TABULAR_CLASSIFICATION.to_dict()},
            training_samples=len(train),
        )
        rows = [
            {
                "features": f,
                "label": y,
                "prediction": p,
                "probabilities": {c: float(proba[i, j]) for j, c in enumerate(DEMO_CLASSES)},
            }
            for i, (f, y, p) in enumerate(zip(frame_rows(holdout), labels[3000:], predicted, strict=True))
        ]
        reference_upload(model=model, rows=rows, source="demo holdout")
        # A check a minute over the last 1,000 samples: the demo's drift shows within minutes.
        MonitoringPolicy.objects.update_or_create(model=model, defaults=DEMO_POLICY)
        RetrainPolicy.objects.update_or_create(model=model, defaults=DEMO_RETRAIN_POLICY)
    return True


def demo_tickets_ensure() -> bool:
    """Register the second demo model once: a ticket router serving from an embedding and the
    ticket's text (no version artifact: the demo traffic is its service), with its reference."""
    if RegisteredModel.objects.filter(name=TICKETS_MODEL).exists():
        return False
    frame, labels, predicted = tickets_frame(1000, seed=3)
    with transaction.atomic():
        model = model_register(
            data={
                "name": TICKETS_MODEL,
                "task": "classification",
                "classes": TICKETS_CLASSES,
                "features": TICKETS_FEATURES,
                "description": "Demo: a ticket router on a text embedding and the ticket's text; a new "
                "product's tickets drift its inputs, not its predictions.",
            }
        )
        rows = [
            {"features": f, "label": y, "prediction": p}
            for f, y, p in zip(frame_rows(frame), labels, predicted, strict=True)
        ]
        reference_upload(model=model, rows=rows, source="demo tickets")
        MonitoringPolicy.objects.update_or_create(model=model, defaults=TICKETS_POLICY)
    return True


def demo_seed() -> DemoSeed:
    password = demo_admin_ensure()
    created = demo_model_ensure()
    demo_tickets_ensure()
    user = get_user_model().objects.get(username="admin")
    _, secret = api_token_create(user=user, scope=Scope.INGEST, name="demo traffic")
    _, reader = api_token_create(user=user, scope=Scope.READ, name="demo traffic: champion downloads")
    return DemoSeed("admin", password, secret, created, reader)


def demo_champion_artifact() -> bytes:
    version = ModelVersion.objects.get(model__name=DEMO_MODEL, status="champion")
    with version.artifact.open("rb") as handle:
        return handle.read()
