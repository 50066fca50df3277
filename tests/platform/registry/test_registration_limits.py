"""A model registers only at a width its checks can query: over the documented limits it is a 400
naming the limit; at the limits a check runs (never a misleading 503)."""

from typing import Any

import pytest
from django.utils import timezone

from registry.models import RegisteredModel
from registry.services import MAX_CLASSES, MAX_FEATURES

pytestmark = pytest.mark.django_db


def _body(features: int, classes: int, name: str = "wide") -> dict[str, Any]:
    return {
        "name": name,
        "task": "classification",
        "features": [{"name": f"f{i}", "type": "numerical"} for i in range(features)],
        "classes": [f"c{i}" for i in range(classes)],
    }


@pytest.mark.parametrize(
    ("features", "classes", "field", "limit"),
    [(10_000, 2, "features", MAX_FEATURES), (3, 5_000, "classes", MAX_CLASSES)],
)
def test_a_model_wider_than_the_limits_is_refused_naming_the_limit(
    ingest: Any, features: int, classes: int, field: str, limit: int
) -> None:
    response = ingest.post("/api/v1/models", _body(features, classes), format="json")
    assert response.status_code == 400
    error = response.json()["errors"][0]
    assert error["field"] == field and f"at most {limit}" in error["message"]
    assert not RegisteredModel.objects.exists()


def test_a_model_at_the_limits_registers_and_its_check_runs(ingest: Any) -> None:
    response = ingest.post("/api/v1/models", _body(MAX_FEATURES, MAX_CLASSES), format="json")
    assert response.status_code == 201, response.json()
    sample = {
        "id": "s1",
        "timestamp": (timezone.now() - timezone.timedelta(minutes=1)).isoformat(),
        "features": {f"f{i}": float(i) for i in range(MAX_FEATURES)},
        "prediction": "c0",
        "probabilities": {f"c{i}": 1.0 / MAX_CLASSES for i in range(MAX_CLASSES)},
    }
    assert (
        ingest.post("/api/v1/models/wide/predictions", {"samples": [sample]}, format="json").status_code
        == 200
    )
    check = ingest.post("/api/v1/models/wide/checks", {}, format="json")
    assert check.status_code in (200, 201), check.json()
