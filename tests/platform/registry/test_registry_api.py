from collections.abc import Callable
from typing import Any

import pandas as pd
import pytest
from rest_framework.test import APIClient

from registry.models import ModelVersion, ReferenceDataset, RegisteredModel
from registry.reference import LABEL, PROBA_PREFIX
from tests.platform.conftest import FEATURES

MODEL = {"name": "churn", "task": "classification", "features": FEATURES, "classes": ["no", "yes"]}


def test_register_model(ingest: APIClient) -> None:
    response = ingest.post("/api/v1/models", MODEL, format="json")
    assert response.status_code == 201, response.json()
    model = RegisteredModel.objects.get(name="churn")
    assert model.feature_types == {"age": "numerical", "income": "numerical", "city": "categorical"}


def test_registering_a_taken_name_is_a_409(ingest: APIClient) -> None:
    ingest.post("/api/v1/models", MODEL, format="json")
    assert ingest.post("/api/v1/models", MODEL, format="json").status_code == 409


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"task": "ranking"}, "task"),
        ({"features": []}, "features"),
        ({"features": [{"name": "a", "type": "audio"}]}, "features.type"),
        (
            {"features": [{"name": "a", "type": "numerical"}, {"name": "a", "type": "numerical"}]},
            "features.name",
        ),
        ({"classes": ["only"]}, "classes"),
        ({"name": "bad name!"}, "name"),
    ],
)
def test_invalid_model_is_rejected(ingest: APIClient, change: dict[str, Any], field: str) -> None:
    response = ingest.post("/api/v1/models", {**MODEL, **change}, format="json")
    assert response.status_code == 400
    assert field in [e["field"] for e in response.json()["errors"]]
    assert not RegisteredModel.objects.exists()


def reference_rows(n: int) -> list[dict[str, Any]]:
    return [
        {
            "features": {"age": 20 + i, "income": 100.0 * i, "city": "paris"},
            "label": "yes" if i % 3 else "no",
            "prediction": "yes",
            "probabilities": {"no": 0.25, "yes": 0.75},
        }
        for i in range(n)
    ]


def test_reference_rows_are_stored_as_parquet(ingest: APIClient, churn: RegisteredModel) -> None:
    response = ingest.post("/api/v1/models/churn/reference", {"rows": reference_rows(30)}, format="json")
    assert response.status_code == 201, response.json()
    reference = ReferenceDataset.objects.get(model=churn, is_active=True)
    frame = pd.read_parquet(reference.file.path)
    assert len(frame) == 30 and reference.rows == 30
    assert frame[LABEL].tolist()[:3] == ["no", "yes", "yes"]
    assert frame[PROBA_PREFIX + "yes"].iloc[0] == 0.75


def test_a_new_reference_replaces_the_active_one(ingest: APIClient, churn: RegisteredModel) -> None:
    ingest.post("/api/v1/models/churn/reference", {"rows": reference_rows(5)}, format="json")
    ingest.post("/api/v1/models/churn/reference", {"rows": reference_rows(7)}, format="json")
    assert list(
        ReferenceDataset.objects.filter(model=churn, is_active=True).values_list("rows", flat=True)
    ) == [7]


def test_reference_csv_upload(ingest: APIClient, churn: RegisteredModel) -> None:
    csv = "age,income,city,label,proba_yes,proba_no\n30,10.5,paris,yes,0.9,0.1\n31,,lyon,no,0.2,0.8\n"
    response = ingest.post("/api/v1/models/churn/reference", csv, content_type="text/csv")
    assert response.status_code == 201, response.json()
    frame = pd.read_parquet(ReferenceDataset.objects.get().file.path)
    assert frame["income"].isna().tolist() == [False, True]


def test_reference_with_a_bad_row_stores_nothing(ingest: APIClient, churn: RegisteredModel) -> None:
    rows = reference_rows(5)
    rows[3]["label"] = "perhaps"
    response = ingest.post("/api/v1/models/churn/reference", {"rows": rows}, format="json")
    assert response.status_code == 400
    assert response.json()["errors"][0]["row"] == 3
    assert not ReferenceDataset.objects.exists()


def test_reference_csv_with_a_bad_number_names_row_and_column(
    ingest: APIClient, churn: RegisteredModel
) -> None:
    csv = "age,income,city,label\n30,1,paris,yes\nold,2,lyon,no\n"
    response = ingest.post("/api/v1/models/churn/reference", csv, content_type="text/csv")
    assert response.status_code == 400
    assert response.json()["errors"][0] == {
        "row": 1,
        "field": "features.age",
        "message": "not a number: 'old'",
    }


def test_first_version_becomes_champion_and_artifact_is_hashed(
    ingest: APIClient, churn: RegisteredModel
) -> None:
    from django.core.files.uploadedfile import SimpleUploadedFile

    artifact = SimpleUploadedFile("model.pt", b"weights")
    response = ingest.post(
        "/api/v1/models/churn/versions",
        {"artifact": artifact, "metrics": '{"accuracy": 0.91}', "config": '{"hidden": 32}'},
        format="multipart",
    )
    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["version"], body["status"], body["metrics"]) == (1, "champion", {"accuracy": 0.91})
    assert len(body["artifact_sha256"]) == 64


def test_promoting_a_new_version_retires_the_old_champion(
    client_for: Callable[[str], APIClient], churn: RegisteredModel
) -> None:
    admin = client_for("admin")
    admin.post("/api/v1/models/churn/versions", {}, format="json")
    assert admin.post("/api/v1/models/churn/versions", {"champion": True}, format="json").status_code == 201
    statuses = dict(ModelVersion.objects.filter(model=churn).values_list("version", "status"))
    assert statuses == {1: "retired", 2: "champion"}


@pytest.mark.parametrize("form", [False, True])
def test_an_ingest_token_cannot_crown_a_champion(
    ingest: APIClient, churn: RegisteredModel, form: bool
) -> None:
    from django.core.files.uploadedfile import SimpleUploadedFile

    ingest.post("/api/v1/models/churn/versions", {}, format="json")
    if form:
        body = {"artifact": SimpleUploadedFile("model.pt", b"weights"), "champion": "true"}
        response = ingest.post("/api/v1/models/churn/versions", body, format="multipart")
    else:
        response = ingest.post("/api/v1/models/churn/versions", {"champion": True}, format="json")
    assert response.status_code == 403 and "admin-scope" in response.json()["detail"]
    statuses = dict(ModelVersion.objects.filter(model=churn).values_list("version", "status"))
    assert statuses == {1: "champion"}


def test_a_later_version_stays_candidate_unless_asked(ingest: APIClient, churn: RegisteredModel) -> None:
    ingest.post("/api/v1/models/churn/versions", {}, format="json")
    body = ingest.post("/api/v1/models/churn/versions", {"metrics": {"accuracy": 0.5}}, format="json").json()
    assert (body["version"], body["status"]) == (2, "candidate")


def test_model_detail_counts_samples(client_for: Callable[[str], APIClient], churn: RegisteredModel) -> None:
    body = client_for("read").get("/api/v1/models/churn").json()
    assert (body["name"], body["samples"], body["labels"], body["champion"]) == ("churn", 0, 0, None)


def test_a_reference_where_every_prediction_is_right_is_uploaded_with_a_warning(
    ingest: APIClient, churn: RegisteredModel
) -> None:
    rows = [r | {"label": "yes"} for r in reference_rows(40)]
    response = ingest.post("/api/v1/models/churn/reference", {"rows": rows}, format="json")
    assert response.status_code == 201
    assert response.json()["warnings"] == [
        "label-free accuracy estimate unavailable: every reference prediction is right: "
        "nothing to calibrate confidence against"
    ]
    ok = ingest.post("/api/v1/models/churn/reference", {"rows": reference_rows(30)}, format="json")
    assert ok.json()["warnings"] == []
