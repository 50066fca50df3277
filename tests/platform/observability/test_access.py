"""Who may scrape /metrics: a read token for every model, or an allowed network; nobody else."""

from collections.abc import Callable

import pytest
from django.contrib.auth import get_user_model
from django.core.exceptions import ImproperlyConfigured
from django.test import Client, override_settings
from rest_framework.test import APIClient

from core.services import api_token_create
from driftwatch.env import networks


def test_metrics_without_a_token_is_401_naming_the_scheme(db: None) -> None:
    response = Client().get("/metrics")
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Bearer"
    assert response.json()["error"] == "not_authenticated"


def test_metrics_with_an_unknown_token_is_401(db: None) -> None:
    response = Client().get("/metrics", HTTP_AUTHORIZATION="Bearer not-a-token")
    assert response.status_code == 401


def test_metrics_with_an_ingest_token_is_403(client_for: Callable[[str], APIClient]) -> None:
    response = client_for("ingest").get("/metrics")
    assert response.status_code == 403
    assert "read" in response.json()["detail"]


def test_metrics_with_a_read_token_is_the_prometheus_text_format(
    client_for: Callable[[str], APIClient],
) -> None:
    response = client_for("read").get("/metrics")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=")
    assert b"# TYPE driftwatch_retrain_jobs gauge" in response.content


def test_an_admin_token_may_scrape(client_for: Callable[[str], APIClient]) -> None:
    assert client_for("admin").get("/metrics").status_code == 200


def test_a_read_token_limited_to_some_models_is_403(db: None) -> None:
    user = get_user_model().objects.create(username="limited")
    _, secret = api_token_create(user=user, scope="read", model_names=["churn"])
    response = Client().get("/metrics", HTTP_AUTHORIZATION=f"Bearer {secret}")
    assert response.status_code == 403


@override_settings(DRIFTWATCH_METRICS_ALLOWED_NETWORKS=networks("test", ["10.1.0.0/16", "127.0.0.0/8"]))
def test_an_allowed_network_scrapes_without_a_token(db: None) -> None:
    assert Client(REMOTE_ADDR="10.1.2.3").get("/metrics").status_code == 200
    assert Client(REMOTE_ADDR="127.0.0.1").get("/metrics").status_code == 200


@override_settings(DRIFTWATCH_METRICS_ALLOWED_NETWORKS=networks("test", ["10.1.0.0/16"]))
def test_an_address_outside_the_allowed_networks_still_needs_a_token(db: None) -> None:
    response = Client(REMOTE_ADDR="10.2.0.1", HTTP_X_FORWARDED_FOR="10.1.2.3").get("/metrics")
    assert response.status_code == 401


def test_metrics_answers_only_get(client_for: Callable[[str], APIClient]) -> None:
    assert client_for("read").post("/metrics").status_code == 405


def test_a_bad_allowed_network_stops_the_process_naming_the_variable() -> None:
    with pytest.raises(ImproperlyConfigured, match="DRIFTWATCH_METRICS_ALLOWED_NETWORKS: 'ten-dot'"):
        networks("DRIFTWATCH_METRICS_ALLOWED_NETWORKS", ["10.0.0.0/8", "ten-dot"])
