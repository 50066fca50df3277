"""Uploading a version that names a recipe: refused with a 400 saying why unless it rebuilds."""

import io
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import override_settings

from registry.models import ModelVersion
from tests.platform.retraining.factories import RECIPE, retrainable_model
from tests.workers.training.headers import with_header_factory

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


def _post_artifact(client: Any, artifact: bytes, name: str = "model.safetensors", config: Any = None) -> Any:
    data: dict[str, Any] = {"artifact": SimpleUploadedFile(name, artifact)}
    if config is not None:
        data["config"] = json.dumps(config)
    return client.post("/api/v1/models/concept/versions", data, format="multipart")


@pytest.mark.parametrize(
    "factory",
    [
        "logging.config:fileConfig",
        "os:system",
        "unittest.__main__:main",
        "workers.training.tabular:__import__",
        "workers.training.tabular.os:system",
    ],
)
def test_a_recipe_factory_outside_the_allowed_modules_is_a_400_naming_the_field(
    client_for, factory: str
) -> None:
    retrainable_model()
    response = _post(client_for("ingest"), _champion_bytes(), {**RECIPE.to_dict(), "factory": factory})
    assert response.status_code == 400 and response["Content-Type"] == "application/json"
    error = response.json()["errors"][0]
    assert error["field"] == "config.recipe.factory"
    assert "DRIFTWATCH_RECIPE_MODULES" in error["message"] or "public function name" in error["message"]
    assert ModelVersion.objects.filter(model__name="concept").count() == 1


@pytest.mark.parametrize("adapter", ["os:system", "tests.workers.training.test_protocols:SplitAdapter"])
def test_a_custom_input_adapter_outside_the_allowed_modules_is_a_400_naming_the_field(
    client_for, adapter: str
) -> None:
    retrainable_model()
    response = _post(client_for("ingest"), _champion_bytes(), {**RECIPE.to_dict(), "adapter": adapter})
    assert response.status_code == 400 and response["Content-Type"] == "application/json"
    error = response.json()["errors"][0]
    assert error["field"] == "config.recipe.adapter" and "DRIFTWATCH_RECIPE_MODULES" in error["message"]
    assert ModelVersion.objects.filter(model__name="concept").count() == 1


@pytest.mark.parametrize("factory", ["os:system", "unittest.__main__:main", "logging.config:fileConfig"])
def test_an_artifact_whose_header_names_a_refused_factory_is_a_400_without_a_config_recipe(
    client_for, factory: str
) -> None:
    retrainable_model()
    response = _post_artifact(client_for("ingest"), with_header_factory(_champion_bytes(), factory))
    assert response.status_code == 400, response.content
    error = response.json()["errors"][0]
    assert error["field"] == "artifact" and "DRIFTWATCH_RECIPE_MODULES" in error["message"]
    assert ModelVersion.objects.filter(model__name="concept").count() == 1


def test_an_allowed_operator_factory_is_built_in_a_child_process_not_the_web_process(
    client_for, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    retrainable_model()
    witness = tmp_path / "built-by"
    (tmp_path / "team_recipes_witness.py").write_text(
        "import os\nfrom workers.training.tabular import mlp_factory as _mlp\n\n"
        "def build(schema, hyperparameters):\n"
        f"    open({str(witness)!r}, 'a').write(str(os.getpid()) + '\\n')\n"
        "    return _mlp(schema, hyperparameters)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    recipe = {**RECIPE.to_dict(), "factory": "team_recipes_witness:build"}
    with override_settings(DRIFTWATCH_RECIPE_MODULES=["team_recipes_witness"]):
        response = _post(client_for("ingest"), _champion_bytes(), recipe)
    assert response.status_code == 201, response.json()
    builders = witness.read_text().split()
    assert builders and str(os.getpid()) not in builders
    assert "team_recipes_witness" not in sys.modules


def test_a_factory_raising_systemexit_is_a_json_400_not_a_crash(
    client_for, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    retrainable_model()
    (tmp_path / "team_recipes_exits.py").write_text("def build(schema, hp):\n    raise SystemExit(2)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with override_settings(DRIFTWATCH_RECIPE_MODULES=["team_recipes_exits"]):
        response = _post(
            client_for("ingest"),
            _champion_bytes(),
            {**RECIPE.to_dict(), "factory": "team_recipes_exits:build"},
        )
    assert response.status_code == 400 and "SystemExit" in response.json()["errors"][0]["message"]
    assert ModelVersion.objects.filter(model__name="concept").count() == 1
