"""Factories and API clients for the Django side."""

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from core.services import api_token_create
from monitoring.samples import WindowBounds, sample_source
from registry.models import RegisteredModel
from tests.clock import FUTURE, at, iso


@pytest.fixture(autouse=True)
def fresh_reference_caches() -> None:
    """A process caches a reference's state by (id, summary file name), which a live database never
    reuses; tests do (SQLite rolls its ids back, and a per-test MEDIA_ROOT gives the same names)."""
    from monitoring import reference

    for cached in (reference._load, reference._band, reference._cached_frame):
        cached.cache_clear()


FEATURES = [
    {"name": "age", "type": "numerical"},
    {"name": "income", "type": "numerical"},
    {"name": "city", "type": "categorical"},
]


def make_model(name: str = "churn", task: str = "classification", **kwargs: Any) -> RegisteredModel:
    defaults: dict[str, Any] = {
        "features": FEATURES,
        "classes": ["no", "yes"] if task == "classification" else [],
    }
    defaults.update(kwargs)
    return RegisteredModel.objects.create(name=name, task=task, **defaults)


def make_sample(i: int, **overrides: Any) -> dict[str, Any]:
    sample: dict[str, Any] = {
        "id": f"s{i}",
        "timestamp": iso(at(hours=4)),
        "features": {"age": 30 + i % 40, "income": 1000.0 + i, "city": ["paris", "lyon"][i % 2]},
        "prediction": ["no", "yes"][i % 2],
        "probabilities": {"no": 0.7, "yes": 0.3} if i % 2 == 0 else {"no": 0.2, "yes": 0.8},
    }
    sample.update(overrides)
    return sample


@pytest.fixture
def client_for(db: None) -> Callable[[str], APIClient]:
    """client_for("ingest") → an APIClient carrying a fresh token of that scope."""

    def build(scope: str) -> APIClient:
        user, _ = get_user_model().objects.get_or_create(username=f"api-{scope}")
        _, secret = api_token_create(user=user, scope=scope)
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
        return client

    return build


@pytest.fixture
def ingest(client_for: Callable[[str], APIClient]) -> APIClient:
    return client_for("ingest")


@pytest.fixture
def churn(db: None) -> RegisteredModel:
    return make_model()


@pytest.fixture
def celery_worker(transactional_db: None) -> Iterator[object]:
    """A real Celery worker (solo pool, in a thread) on the configured broker and database."""
    from celery.contrib.testing.worker import start_worker

    from workers import queues
    from workers.celery_app import app

    app.control.purge()  # messages left by earlier runs must not leak into this test
    with start_worker(
        app,
        pool="solo",
        perform_ping_check=False,
        queues=[queues.DEFAULT, queues.CHECKS],
        shutdown_timeout=30,
    ) as worker:
        yield worker


def row_path_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Predictions requests validated row by row: the path a request takes when the column tests
    (monitoring.store.columns) do not pass it, taken here by every request."""
    from monitoring import services

    monkeypatch.setattr(services, "columns_clean", lambda rows, cleaner: None)


def stored_window(model: RegisteredModel) -> dict[str, Any]:
    """Every stored sample of ``model`` as the configured store hands them to a check (columns)."""
    return sample_source().load(model=model, window=WindowBounds(None, FUTURE)).arrays


def stored_features(model: RegisteredModel) -> dict[str, dict[str, Any]]:
    """Each stored sample's feature values (sample id -> name -> value) as the configured store
    gives them back to a check: numbers as floats, a missing value as None."""
    arrays = stored_window(model)
    names = [f["name"] for f in model.features]
    return {
        str(sample_id): {name: _plain(arrays[name][row]) for name in names}
        for row, sample_id in enumerate(arrays["sample_id"])
    }


def _plain(value: Any) -> Any:
    if value is None or (isinstance(value, float) and value != value):
        return None
    return value.item() if hasattr(value, "item") else value
