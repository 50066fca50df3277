"""Uploaded files live outside every import path: no dotted name from any sys.path entry of the
web or worker process reaches them, and none keeps a suffix Python imports."""

import importlib
import importlib.machinery
import sys
from pathlib import Path
from typing import Any

import pytest
from django.core.files.storage import default_storage
from django.core.files.uploadedfile import SimpleUploadedFile

from driftwatch.paths import ROOT, dotted_name_reaching
from registry.models import ModelVersion
from tests.platform.driftwatch.test_settings import manage

pytestmark = pytest.mark.django_db


def _candidate_names(path: Path) -> list[str]:
    """Every dotted name an import of ``path`` from a sys.path entry could use."""
    names = []
    for entry in sys.path:
        try:
            parts = path.resolve().relative_to(Path(entry or ".").resolve()).parts
        except ValueError:
            continue
        stem = parts[-1].split(".")[0]
        names += [".".join([*parts[:-1], stem]), ".".join([*parts[:-1], parts[-1].rsplit(".", 1)[0]])]
    return names


def test_an_uploaded_py_file_cannot_be_imported_from_any_import_path(
    client_for: Any, churn: Any, tmp_path: Path
) -> None:
    marker = tmp_path / "imported"
    code = f"open({str(marker)!r}, 'w').write('ran')\ndef factory(schema, hp):\n    return None\n"
    response = client_for("ingest").post(
        "/api/v1/models/churn/versions",
        {"artifact": SimpleUploadedFile("r3mod.py", code.encode())},
        format="multipart",
    )
    assert response.status_code == 201, response.content
    stored = Path(default_storage.path(ModelVersion.objects.get(model=churn).artifact.name))
    assert stored.exists() and not stored.name.endswith(tuple(importlib.machinery.all_suffixes()))
    assert dotted_name_reaching(stored.parent, sys.path) is None
    for name in _candidate_names(stored):
        with pytest.raises(ImportError):
            importlib.import_module(name)
    assert not marker.exists()


def test_the_default_media_root_is_reached_by_no_dotted_name() -> None:
    result = manage("shell", "-c", "from django.conf import settings; print(settings.MEDIA_ROOT)")
    assert result.returncode == 0, result.stderr
    media_root = Path(result.stdout.strip().splitlines()[-1])
    assert dotted_name_reaching(media_root, [str(ROOT), str(ROOT / "platform")]) is None


def test_a_media_root_inside_an_import_path_stops_the_process() -> None:
    result = manage("check", DRIFTWATCH_MEDIA_ROOT=str(ROOT / "uploads_probe"))
    assert result.returncode != 0
    assert "DRIFTWATCH_MEDIA_ROOT" in result.stderr and "'uploads_probe'" in result.stderr
