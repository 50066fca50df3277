"""The database or broker unreachable: 503 with a JSON body naming what is down, never a 500.

The outage is real: the connection is pointed at an address where nothing answers (a closed
port on PostgreSQL, a path that cannot exist on SQLite); nothing is mocked.
"""

import socket
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client
from rest_framework.test import APIClient

from tests.platform.conftest import make_model, make_sample


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def database_down(transactional_db: None) -> Iterator[str]:
    """Yields what a leak would show (the host:port or file the app would try)."""
    saved = dict(connection.settings_dict)
    connection.close()
    if connection.vendor == "postgresql":
        port = _closed_port()
        connection.settings_dict.update(HOST="127.0.0.1", PORT=port)
        secret = f"127.0.0.1:{port}"
    else:
        connection.settings_dict["NAME"] = "/nonexistent-driftwatch-dir/db.sqlite3"
        secret = "nonexistent-driftwatch-dir"
    try:
        yield secret
    finally:
        connection.close()
        connection.settings_dict.clear()
        connection.settings_dict.update(saved)


@pytest.fixture
def reader(client_for: Callable[[str], APIClient], transactional_db: None) -> APIClient:
    make_model()
    return client_for("read")


def test_api_answers_503_json_when_the_database_is_down(reader: APIClient, database_down: str) -> None:
    response = reader.get("/api/v1/models/churn/checks")
    assert response.status_code == 503
    assert response["Content-Type"] == "application/json"
    assert response.json()["error"] == "database_unavailable"
    assert response["Retry-After"]
    assert database_down not in response.content.decode()


def test_ingestion_answers_503_json_when_the_database_is_down(reader: APIClient, database_down: str) -> None:
    response = reader.post("/api/v1/models/churn/predictions", {"samples": [make_sample(1)]}, format="json")
    assert response.status_code == 503
    assert response.json()["error"] == "database_unavailable"


@pytest.fixture
def staff_browser(transactional_db: None) -> Client:
    browser = Client()
    browser.force_login(get_user_model().objects.create_user("ops", is_staff=True))
    return browser


def test_dashboard_answers_503_when_the_database_is_down(staff_browser: Client, database_down: str) -> None:
    response = staff_browser.get("/")
    assert response.status_code == 503
    assert response.json()["error"] == "database_unavailable"


def test_healthz_says_the_database_is_down_without_saying_where_it_is(database_down: str) -> None:
    response = Client().get("/healthz")
    assert response.status_code == 503
    body = response.json()
    assert body["database"] == {"ok": False, "error": "unavailable"}
    assert database_down not in response.content.decode()
    assert "connection" not in response.content.decode().lower()


def test_healthz_says_the_broker_is_down_without_saying_where_it_is(db: None, broker_down: None) -> None:
    response = Client().get("/healthz")
    assert response.status_code == 503
    assert response.json()["broker"] == {"ok": False, "error": "unavailable"}
    assert "127.0.0.1" not in response.content.decode()


def test_an_api_url_that_matches_no_route_is_a_json_404(db: None, settings: Any) -> None:
    settings.DEBUG = False
    response = Client().get("/api/v1/retrain-jobs/null,null")
    assert response.status_code == 404
    assert response.json()["error"] == "not_found"
