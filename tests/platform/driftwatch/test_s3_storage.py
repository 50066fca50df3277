"""Files go to S3 when DRIFTWATCH_S3_BUCKET is set: references, check reports, model artifacts and
holdouts round-trip through a real S3 protocol exchange with moto's S3 server on a free port."""

import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest
from django.contrib.auth.models import User
from django.test import Client
from moto.server import ThreadedMotoServer

from driftwatch.backends import default_storage_from_env
from monitoring.reports import check_report_render
from registry.models import ModelVersion
from retraining.models import Decision, JobState
from tests.live import ROOT, child_env, free_port
from tests.platform.monitoring.test_reports import make_check
from tests.platform.retraining.factories import champion_predictor, drifted_model, run

KEYS = {"DRIFTWATCH_S3_ACCESS_KEY_ID": "driftwatch-test", "DRIFTWATCH_S3_SECRET_ACCESS_KEY": "not-a-secret"}


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    yield f"http://127.0.0.1:{port}"
    server.stop()


def s3_client(endpoint: str) -> Any:
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id=KEYS["DRIFTWATCH_S3_ACCESS_KEY_ID"],
        aws_secret_access_key=KEYS["DRIFTWATCH_S3_SECRET_ACCESS_KEY"],
    )


def new_bucket(endpoint: str) -> str:
    name = f"driftwatch-{uuid.uuid4().hex[:12]}"
    s3_client(endpoint).create_bucket(Bucket=name)
    return name


def bucket_keys(endpoint: str, bucket: str) -> list[str]:
    listing = s3_client(endpoint).list_objects_v2(Bucket=bucket)
    return sorted(item["Key"] for item in listing.get("Contents", []))


def s3_environment(endpoint: str, bucket: str) -> dict[str, str]:
    return {
        "DRIFTWATCH_S3_BUCKET": bucket,
        "DRIFTWATCH_S3_ENDPOINT_URL": endpoint,
        "DRIFTWATCH_S3_PREFIX": "prod/driftwatch",
        **KEYS,
    }


@dataclass
class Bucket:
    name: str
    media_root: Path  # stays empty: nothing may write files past the storage

    def local_files(self) -> list[Path]:
        return list(self.media_root.rglob("*"))


@pytest.fixture
def s3_storage(s3_endpoint: str, settings: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Bucket:
    """This test's files go to a fresh bucket, configured exactly as settings.py does from the env."""
    bucket = Bucket(new_bucket(s3_endpoint), tmp_path / "media")
    for name, value in s3_environment(s3_endpoint, bucket.name).items():
        monkeypatch.setenv(name, value)
    settings.STORAGES = {**settings.STORAGES, "default": default_storage_from_env()}
    settings.MEDIA_ROOT = bucket.media_root
    return bucket


def test_storage_configured_from_the_environment_writes_to_the_bucket(s3_endpoint: str) -> None:
    bucket = new_bucket(s3_endpoint)
    code = (
        "from django.core.files.base import ContentFile; "
        "from django.core.files.storage import default_storage as s; "
        "name = s.save('reports/hello.html', ContentFile(b'<p>hi</p>')); "
        "print(type(s._wrapped).__name__, name, s.open(name).read().decode())"
    )
    result = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", code],
        cwd=ROOT,
        env=child_env(**s3_environment(s3_endpoint, bucket)),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "S3Storage reports/hello.html <p>hi</p>"
    assert bucket_keys(s3_endpoint, bucket) == ["prod/driftwatch/reports/hello.html"]


@pytest.mark.django_db(transaction=True)
def test_reference_and_check_report_round_trip_through_s3(s3_endpoint: str, s3_storage: Bucket) -> None:
    check = make_check()  # uploads the reference; the check reads its summary back
    name = check_report_render(check_id=check.pk)
    keys = bucket_keys(s3_endpoint, s3_storage.name)
    assert f"prod/driftwatch/{name}" in keys and name == f"reports/check-{check.pk}.html"
    assert any(key.startswith(f"prod/driftwatch/references/{check.model.name}/") for key in keys)
    staff = User.objects.create_user("ops", password="pw-not-used", is_staff=True)
    client = Client()
    client.force_login(staff)
    response = client.get(f"/checks/{check.pk}/report")
    html = b"".join(response.streaming_content).decode()  # type: ignore[attr-defined]
    assert response.status_code == 200 and html.lstrip().lower().startswith("<!doctype html>")
    assert s3_storage.local_files() == []


@pytest.mark.django_db
def test_retraining_stores_and_loads_model_artifacts_through_s3(s3_endpoint: str, s3_storage: Bucket) -> None:
    model = drifted_model()  # the champion's artifact and reference are uploaded to the bucket
    job = run(model)
    assert (job.state, job.decision) == (JobState.SUCCEEDED, Decision.PROMOTED), job.log
    new = ModelVersion.objects.get(model=model, status="champion")
    keys = bucket_keys(s3_endpoint, s3_storage.name)
    assert f"prod/driftwatch/{new.artifact.name}" in keys
    assert f"prod/driftwatch/{job.holdout.name}" in keys
    assert f"prod/driftwatch/artifacts/{model.name}/v{new.version}/" in f"prod/driftwatch/{new.artifact.name}"
    assert champion_predictor(model).bundle.recipe.to_dict() == new.config["recipe"]  # read back from S3
    assert s3_storage.local_files() == []
