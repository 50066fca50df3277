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
from workers.demo import DEMO_CLASSES, DEMO_FEATURES, DEMO_MODEL, demo_frame, frame_rows
from workers.training.tabular import train_tabular_classifier

DEMO_POLICY = {
    "window_kind": WindowKind.SAMPLES,
    "window_size": 1000,
    "check_every_minutes": 1,
    "min_samples": 200,
    "min_labels": 200,
    "cooldown_minutes": 10,
}


@dataclass(frozen=True)
class DemoSeed:
    admin_username: str
    admin_password: str | None  # None when the admin already existed (password unchanged)
    ingest_token: str
    created_model: bool


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
    clf = train_tabular_classifier(train, labels[:3000], feature_types=DEMO_FEATURES, classes=DEMO_CLASSES)
    proba = clf.predict_proba(holdout)
    predicted = [DEMO_CLASSES[i] for i in proba.argmax(axis=1)]
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
            artifact=ContentFile(clf.to_bytes(), name="model.pt"),
            champion=True,
            metrics={"accuracy": round(accuracy, 4)},
            source="demo seed",
            config={"builder": "workers.training.tabular", "hidden": clf.hidden, "epochs": 30},
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
    return True


def demo_seed() -> DemoSeed:
    password = demo_admin_ensure()
    created = demo_model_ensure()
    user = get_user_model().objects.get(username="admin")
    _, secret = api_token_create(user=user, scope=Scope.INGEST, name="demo traffic")
    return DemoSeed("admin", password, secret, created)


def demo_champion_artifact() -> bytes:
    version = ModelVersion.objects.get(model__name=DEMO_MODEL, status="champion")
    with version.artifact.open("rb") as handle:
        return handle.read()
