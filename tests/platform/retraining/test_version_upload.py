"""Uploading a version that names a recipe: refused with a 400 saying why unless it rebuilds."""

import io
import json
import os
from pathlib import Path
from typing import Any

import pytest
import torch
from django.core.files.uploadedfile import SimpleUploadedFile

from registry.models import ModelVersion
from tests.platform.retraining.factories import RECIPE, retrainable_model

pytestmark = pytest.mark.django_db


def _post(client: Any, artifact: bytes, recipe: Any) -> Any:
    return client.post(
        "/api/v1/models/concept/versions",
        {"artifact": SimpleUploadedFile("model.bin", artifact), "config": json.dumps({"recipe": recipe})},
        format="multipart",
    )


def _champion_bytes() -> bytes:
    with ModelVersion.objects.get(model__name="concept", status="champion").artifact.open("rb") as f:
        return f.read()


def test_a_version_with_a_working_recipe_and_weights_is_stored(client_for) -> None:
    retrainable_model()
    response = _post(client_for("ingest"), _champion_bytes(), RECIPE.to_dict())
    assert response.status_code == 201, response.json()
    assert response.json()["config"]["recipe"]["factory"] == RECIPE.factory


def test_a_recipe_whose_factory_does_not_import_is_refused(client_for) -> None:
    retrainable_model()
    response = _post(client_for("ingest"), _champion_bytes(), {"factory": "nowhere_xyz:build"})
    assert response.status_code == 400
    assert response.json()["errors"][0]["field"] == "config.recipe.factory"
    assert ModelVersion.objects.filter(model__name="concept").count() == 1


def test_weights_that_do_not_fit_the_recipe_are_refused(client_for) -> None:
    retrainable_model()
    response = _post(client_for("ingest"), _champion_bytes(), {"hyperparameters": {"hidden": 7}})
    assert response.status_code == 400 and "do not fit" in response.json()["errors"][0]["message"]


class _Exploit:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> Any:
        return (os.system, (f"touch {self.marker}",))


def test_a_malicious_pickle_as_weights_is_refused(client_for, tmp_path: Path) -> None:
    retrainable_model()
    marker = tmp_path / "pwned"
    buffer = io.BytesIO()
    torch.save({"state_dict": {}, "x": _Exploit(marker)}, buffer)
    response = _post(client_for("ingest"), buffer.getvalue(), "tabular-classification")
    assert response.status_code == 400 and "refused" in response.json()["errors"][0]["message"]
    assert not marker.exists()
    assert ModelVersion.objects.filter(model__name="concept").count() == 1
