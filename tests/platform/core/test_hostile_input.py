"""Hostile bodies, strings and URLs get a 400 (or 411/415) naming the field, never a 500; nothing is stored."""

from typing import Any

import pytest
from rest_framework.test import APIClient

from monitoring.models import PredictionSample
from registry.models import RegisteredModel
from tests.clock import T0, iso
from tests.platform.conftest import make_sample

URL = "/api/v1/models/churn/predictions"


def raw_post(client: APIClient, body: bytes, url: str = URL, **extra: Any) -> Any:
    return client.generic("POST", url, body, content_type="application/json", **extra)


def first_error(response: Any) -> dict[str, Any]:
    return response.json()["errors"][0]


def test_json_nested_100000_deep_is_a_400(ingest: APIClient, churn: RegisteredModel) -> None:
    response = raw_post(ingest, b"[" * 100_000)
    assert response.status_code == 400
    assert first_error(response)["field"] == "body"


def test_json_nested_deep_with_a_nan_token_is_a_400(ingest: APIClient, churn: RegisteredModel) -> None:
    # NaN makes orjson refuse the body, so the lenient fallback parser sees the nesting.
    response = raw_post(ingest, b"[NaN," + b"[" * 100_000)
    assert response.status_code == 400


@pytest.mark.parametrize("depth", [1_023, 100_000])
def test_a_sample_nested_past_the_depth_limit_is_a_400_naming_the_body(
    ingest: APIClient, churn: RegisteredModel, depth: int
) -> None:
    # Rows are read from raw spans (msgspec, then orjson a row at a time); the whole body's
    # 1,024-level limit still holds for a row that starts two levels down.
    response = raw_post(ingest, b'{"samples":[' + b"[" * depth + b"]" * depth + b"]}")
    assert response.status_code == 400
    assert first_error(response) == {
        "row": None,
        "field": "body",
        "message": "JSON nested deeper than 1,024 levels",
    }
    assert not PredictionSample.objects.exists()


def test_nul_in_a_category_value_is_a_400_naming_row_and_field(
    ingest: APIClient, churn: RegisteredModel
) -> None:
    sample = make_sample(1, features={"age": 30, "income": 1.0, "city": "par\u0000is"})
    response = ingest.post(URL, {"samples": [make_sample(0), sample]}, format="json")
    assert response.status_code == 400
    assert (first_error(response)["row"], first_error(response)["field"]) == (1, "features.city")
    assert not PredictionSample.objects.exists()


def test_nul_in_a_sample_id_is_a_400(ingest: APIClient, churn: RegisteredModel) -> None:
    response = ingest.post(URL, {"samples": [make_sample(0, id="a\u0000b")]}, format="json")
    assert response.status_code == 400
    assert (first_error(response)["row"], first_error(response)["field"]) == (0, "id")


def test_nul_in_a_field_name_is_a_400(ingest: APIClient, churn: RegisteredModel) -> None:
    response = raw_post(ingest, b'{"samples": [{"i\\u0000d": "x"}]}')
    assert response.status_code == 400
    assert first_error(response)["row"] == 0


def test_lone_surrogate_is_a_400(ingest: APIClient, churn: RegisteredModel) -> None:
    body = b'{"samples": [{"id": "x", "features": {"age": 1, "income": NaN, "city": "\\ud800"}}]}'
    response = raw_post(ingest, body)
    assert response.status_code == 400
    assert (first_error(response)["row"], first_error(response)["field"]) == (0, "features.city")


def test_lone_surrogate_in_model_registration_is_a_400(ingest: APIClient) -> None:
    body = b'{"name": "m", "task": "regression", "features": [{"name": "\\udc00", "type": "numerical"}]}'
    response = raw_post(ingest, body, url="/api/v1/models")
    assert response.status_code == 400
    assert first_error(response)["field"] == "features[0].name"
    assert not RegisteredModel.objects.exists()


@pytest.mark.parametrize(
    "url", ["/api/v1/models/churn/alerts?state=op%00en", "/api/v1/models/ch%00urn/alerts"]
)
def test_nul_in_a_query_parameter_or_path_is_a_400(client_for: Any, churn: RegisteredModel, url: str) -> None:
    response = client_for("read").get(url)
    assert response.status_code == 400
    assert first_error(response)["field"] in ("state", "path")


@pytest.mark.parametrize("value", [f"{iso(T0, tz=False)}+23:00", f"{iso(T0, tz=False)}-16:00"])
def test_checks_query_with_a_timezone_offset_beyond_1559_is_a_400(
    client_for: Any, churn: RegisteredModel, value: str
) -> None:
    response = client_for("read").get("/api/v1/models/churn/checks", {"start": value})
    assert response.status_code == 400
    assert first_error(response)["field"] == "start"


def test_ingested_timestamp_with_an_offset_beyond_1559_is_a_400(
    ingest: APIClient, churn: RegisteredModel
) -> None:
    response = ingest.post(
        URL, {"samples": [make_sample(0, timestamp=f"{iso(T0, tz=False)}+20:00")]}, format="json"
    )
    assert response.status_code == 400
    assert (first_error(response)["row"], first_error(response)["field"]) == (0, "timestamp")


def test_csv_field_over_131072_characters_is_a_400_naming_row_and_column(
    ingest: APIClient, churn: RegisteredModel
) -> None:
    csv = "age,income,city,label\n30,1.0,paris,no\n31,2.0," + "x" * 200_000 + ",yes\n"
    response = ingest.generic("POST", "/api/v1/models/churn/reference", csv, content_type="text/csv")
    assert response.status_code == 400
    assert (first_error(response)["row"], first_error(response)["field"]) == (1, "features.city")


def test_csv_with_a_nul_byte_is_a_400(ingest: APIClient, churn: RegisteredModel) -> None:
    csv = "age,income,city,label\n30,1.0,pa\x00ris,no\n"
    response = ingest.generic("POST", "/api/v1/models/churn/reference", csv, content_type="text/csv")
    assert response.status_code == 400
    assert first_error(response)["field"] == "file"


def test_nul_in_a_multipart_json_field_is_a_400(ingest: APIClient, churn: RegisteredModel) -> None:
    response = ingest.post(
        "/api/v1/models/churn/versions", {"metrics": '{"acc\\u0000": 1}'}, format="multipart"
    )
    assert response.status_code == 400
    assert response.json()["errors"][0]["field"].startswith("metrics.")
