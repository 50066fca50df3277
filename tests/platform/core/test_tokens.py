"""Tokens expire, can be limited to models, record their last use and are rate limited on ingestion."""

from contextlib import AbstractContextManager
from datetime import timedelta
from io import StringIO
from typing import Any

from django.contrib.auth.models import User
from django.core.management import call_command
from django.utils import timezone
from rest_framework.test import APIClient

from core.models import ApiToken
from core.services import api_token_create
from monitoring.models import PredictionSample
from registry.models import RegisteredModel
from tests.clock import at, wall_clock
from tests.platform.conftest import make_model, make_sample

PREDICTIONS = "/api/v1/models/churn/predictions"


def client_with(**token: Any) -> tuple[APIClient, ApiToken]:
    user, _ = User.objects.get_or_create(username="svc")
    row, secret = api_token_create(user=user, scope=token.pop("scope", "ingest"), **token)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    return client, row


def post_one(client: APIClient, i: int = 1, url: str = PREDICTIONS) -> Any:
    return client.post(url, {"samples": [make_sample(i)]}, format="json")


def test_expired_token_is_a_401(churn: RegisteredModel) -> None:
    client, _ = client_with(expires_at=timezone.now() - timedelta(seconds=1))
    response = post_one(client)
    assert response.status_code == 401
    assert "expired" in response.json()["detail"]
    assert not PredictionSample.objects.exists()


def test_token_before_its_expiry_works(churn: RegisteredModel) -> None:
    client, _ = client_with(expires_at=timezone.now() + timedelta(days=1))
    assert post_one(client).status_code == 200


def test_command_tokens_expire_in_90_days_unless_told_otherwise(db: None) -> None:
    call_command("create_api_token", "alice", "--scope", "read", "--create-user", stdout=StringIO())
    token = ApiToken.objects.get()
    assert token.expires_at is not None
    assert timedelta(days=89) < token.expires_at - timezone.now() <= timedelta(days=90)


def test_model_limited_token_acts_only_on_its_models(churn: RegisteredModel) -> None:
    make_model(name="other")
    client, _ = client_with(model_names=["churn"])
    assert post_one(client).status_code == 200
    refused = post_one(client, 2, url="/api/v1/models/other/predictions")
    assert refused.status_code == 403 and "churn" in refused.json()["detail"]
    assert not PredictionSample.objects.filter(model__name="other").exists()


def test_model_limited_token_cannot_register_or_list_models(db: None) -> None:
    client, _ = client_with(scope="admin", model_names=["churn"])
    assert client.get("/api/v1/models").status_code == 403


def test_last_used_time_is_recorded(churn: RegisteredModel) -> None:
    client, token = client_with()
    assert token.last_used_at is None
    post_one(client)
    token.refresh_from_db()
    assert token.last_used_at is not None and timezone.now() - token.last_used_at < timedelta(minutes=1)


def at_a_minute_start() -> AbstractContextManager[object]:
    """The limit counts per clock minute: the burst starts as one begins (the wall clock moved to
    a round hour, ticking), so it stays in that minute."""
    return wall_clock(at(hours=5))


def test_ingestion_over_the_rate_limit_is_a_429_with_retry_after(churn: RegisteredModel) -> None:
    client, _ = client_with(rate_limit_per_minute=3)
    with at_a_minute_start():
        responses = [post_one(client, i) for i in range(4)]
        assert [r.status_code for r in responses] == [200, 200, 200, 429]
        assert 1 <= int(responses[3]["Retry-After"]) <= 60
        assert not PredictionSample.objects.filter(sample_id="s3").exists()


def test_the_rate_limit_is_per_token(churn: RegisteredModel) -> None:
    first, _ = client_with(rate_limit_per_minute=1)
    second, _ = client_with(rate_limit_per_minute=1)
    with at_a_minute_start():
        assert [post_one(first, 1).status_code, post_one(first, 2).status_code] == [200, 429]
        assert post_one(second, 3).status_code == 200


def test_reads_are_not_rate_limited(churn: RegisteredModel, settings: Any) -> None:
    settings.DRIFTWATCH_INGEST_RATE_PER_MINUTE = 1
    client, _ = client_with(scope="read")
    assert [client.get("/api/v1/models/churn").status_code for _ in range(3)] == [200, 200, 200]


def test_the_default_rate_comes_from_the_setting(churn: RegisteredModel, settings: Any) -> None:
    settings.DRIFTWATCH_INGEST_RATE_PER_MINUTE = 2
    client, _ = client_with()
    with at_a_minute_start():
        assert [post_one(client, i).status_code for i in range(3)] == [200, 200, 429]


def test_a_token_limit_of_zero_turns_the_limit_off(churn: RegisteredModel, settings: Any) -> None:
    settings.DRIFTWATCH_INGEST_RATE_PER_MINUTE = 1
    client, _ = client_with(rate_limit_per_minute=0)
    assert [post_one(client, i).status_code for i in range(3)] == [200, 200, 200]
