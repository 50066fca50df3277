"""Every input has a limit and a 4xx: chunked bodies, names, labels, values, descriptions, rows,
content types, file names."""

from typing import Any

import pytest
from rest_framework.test import APIClient

from monitoring.models import PredictionSample
from registry.models import ModelVersion, ReferenceDataset, RegisteredModel
from tests.platform.conftest import FEATURES, make_sample

MODEL = {"name": "churn", "task": "classification", "features": FEATURES, "classes": ["no", "yes"]}
MB = "x" * 1_000_000


def register(client: APIClient, **changes: Any) -> Any:
    return client.post("/api/v1/models", {**MODEL, **changes}, format="json")


def test_chunked_body_without_length_is_a_411(ingest: APIClient, churn: RegisteredModel) -> None:
    response = ingest.generic(
        "POST",
        "/api/v1/models/churn/predictions",
        b"",
        content_type="application/json",
        HTTP_TRANSFER_ENCODING="chunked",
    )
    assert response.status_code == 411
    assert response.json()["errors"][0]["field"] == "Content-Length"


def test_model_name_with_a_trailing_newline_is_refused(ingest: APIClient) -> None:
    response = register(ingest, name="probe\n")
    assert response.status_code == 400 and response.json()["errors"][0]["field"] == "name"
    assert not RegisteredModel.objects.exists()


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"features": [{"name": MB, "type": "numerical"}]}, "features.name"),
        ({"classes": ["no", MB]}, "classes"),
        ({"description": MB}, "description"),
    ],
)
def test_megabyte_names_labels_and_descriptions_are_refused(
    ingest: APIClient, change: dict[str, Any], field: str
) -> None:
    response = register(ingest, **change)
    assert response.status_code == 400 and response.json()["errors"][0]["field"] == field
    assert not RegisteredModel.objects.exists()


def test_megabyte_category_value_is_refused(ingest: APIClient, churn: RegisteredModel) -> None:
    sample = make_sample(0, features={"age": 1, "income": 1.0, "city": MB})
    response = ingest.post("/api/v1/models/churn/predictions", {"samples": [sample]}, format="json")
    assert response.status_code == 400
    assert response.json()["errors"][0] == {
        "row": 0,
        "field": "features.city",
        "message": "at most 1000 characters",
    }
    assert not PredictionSample.objects.exists()


def test_reference_over_the_row_cap_is_refused(
    ingest: APIClient, churn: RegisteredModel, settings: Any
) -> None:
    settings.DRIFTWATCH_MAX_REFERENCE_ROWS = 3
    rows = [{"features": {"age": 1, "income": 2.0, "city": "a"}, "label": "no"}] * 4
    response = ingest.post("/api/v1/models/churn/reference", {"rows": rows}, format="json")
    assert response.status_code == 400 and response.json()["errors"][0]["field"] == "rows"
    assert not ReferenceDataset.objects.exists()


def test_json_body_with_another_content_type_is_a_415(ingest: APIClient, churn: RegisteredModel) -> None:
    body = b'{"samples": [{"id": "1"}]}'
    response = ingest.generic("POST", "/api/v1/models/churn/predictions", body, content_type="text/plain")
    assert response.status_code == 415


def test_artifact_named_dot_dot_is_a_400_not_a_version_without_it(
    ingest: APIClient, churn: RegisteredModel
) -> None:
    body = (
        b"--B\r\n"
        b'Content-Disposition: form-data; name="artifact"; filename=".."\r\n'
        b"Content-Type: application/octet-stream\r\n\r\nweights\r\n--B--\r\n"
    )
    response = ingest.generic(
        "POST", "/api/v1/models/churn/versions", body, content_type="multipart/form-data; boundary=B"
    )
    assert response.status_code == 400
    assert response.json()["errors"][0]["field"] == "filename"
    assert not ModelVersion.objects.exists()
