from collections.abc import Callable
from io import StringIO

import pytest
from django.core.management import call_command
from rest_framework.test import APIClient

from core.models import ApiToken, hash_token
from registry.models import RegisteredModel
from tests.platform.conftest import make_sample

PREDICTIONS = "/api/v1/models/churn/predictions"


def test_request_without_token_is_a_401(churn: RegisteredModel) -> None:
    response = APIClient().post(PREDICTIONS, {"samples": [make_sample(1)]}, format="json")
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Bearer"


def test_unknown_token_is_a_401(churn: RegisteredModel) -> None:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Bearer dw_not-a-real-token")
    assert client.get("/api/v1/models").status_code == 401


def test_revoked_token_is_a_401(client_for: Callable[[str], APIClient], churn: RegisteredModel) -> None:
    client = client_for("read")
    ApiToken.objects.update(revoked=True)
    assert client.get("/api/v1/models").status_code == 401


@pytest.mark.parametrize(
    ("scope", "method", "url", "expected"),
    [
        ("read", "post", PREDICTIONS, 403),
        ("ingest", "post", PREDICTIONS, 200),
        ("admin", "post", PREDICTIONS, 200),
        ("ingest", "get", "/api/v1/models", 403),
        ("read", "get", "/api/v1/models", 200),
        ("admin", "get", "/api/v1/models/churn", 200),
    ],
)
def test_scopes_gate_each_endpoint(
    client_for: Callable[[str], APIClient],
    churn: RegisteredModel,
    scope: str,
    method: str,
    url: str,
    expected: int,
) -> None:
    client = client_for(scope)
    response = getattr(client, method)(
        url, {"samples": [make_sample(1)]} if method == "post" else None, format="json"
    )
    assert response.status_code == expected, response.content


def test_wrong_scope_names_the_scope_needed(
    client_for: Callable[[str], APIClient], churn: RegisteredModel
) -> None:
    response = client_for("read").post(PREDICTIONS, {"samples": [make_sample(1)]}, format="json")
    assert "ingest" in response.json()["detail"]


def test_create_api_token_command_stores_only_the_hash(db: None) -> None:
    out = StringIO()
    call_command("create_api_token", "alice", "--scope", "ingest", "--create-user", stdout=out)
    secret = out.getvalue().strip()
    token = ApiToken.objects.get()
    assert token.key_hash == hash_token(secret)
    assert secret not in (token.key_hash, token.prefix)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    assert client.get("/api/v1/models").status_code == 403  # ingest cannot read


def test_create_api_token_refuses_unknown_scope(db: None) -> None:
    with pytest.raises(Exception, match="invalid choice"):
        call_command("create_api_token", "alice", "--scope", "root", "--create-user")
