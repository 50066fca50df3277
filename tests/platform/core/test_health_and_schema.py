from typing import Any

import pytest
from django.test import Client


def test_healthz_reports_database_and_broker(db: None) -> None:
    response = Client().get("/healthz")
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["database"]["ok"] and body["broker"]["ok"]


def test_healthz_is_503_when_the_broker_is_down(db: None, broker_down: None) -> None:
    response = Client().get("/healthz")
    assert response.status_code == 503
    assert response.json()["broker"]["ok"] is False


def test_openapi_schema_lists_the_ingestion_endpoints(db: None, settings: Any) -> None:
    settings.DRIFTWATCH_PUBLIC_API_DOCS = True
    response = Client().get("/api/schema/", HTTP_ACCEPT="application/json")
    assert response.status_code == 200
    paths = response.json()["paths"]
    for path in (
        "/api/v1/models",
        "/api/v1/models/{name}/predictions",
        "/api/v1/models/{name}/labels",
        "/api/v1/models/{name}/reference",
        "/api/v1/models/{name}/versions",
    ):
        assert path in paths


@pytest.mark.parametrize("url", ["/api/docs/"])
def test_api_docs_page_is_served_without_a_cdn(db: None, url: str, settings: Any) -> None:
    settings.DRIFTWATCH_PUBLIC_API_DOCS = True
    response = Client().get(url)
    assert response.status_code == 200
    assert b"cdn.jsdelivr" not in response.content


def test_api_docs_and_schema_need_a_login_or_token_by_default(db: None) -> None:
    assert Client().get("/api/schema/").status_code == 401
    docs = Client().get("/api/docs/")
    assert docs.status_code == 302 and docs["Location"].startswith("/login/")


def test_schema_is_served_to_a_token_holder(client_for: Any) -> None:
    response = client_for("read").get("/api/schema/", HTTP_ACCEPT="application/json")
    assert response.status_code == 200
    assert "bearerToken" in response.json()["components"]["securitySchemes"]
