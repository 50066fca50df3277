"""The model page never shows a webhook URL's path or query (credentials often live there):
staff see its host, other users nothing of it."""

from collections.abc import Callable

import pytest
from django.contrib.auth.models import User
from django.test import Client

from monitoring.models import MonitoringPolicy
from tests.platform.monitoring.factories import monitored_model

HOOK = "https://hooks.example.com/services/T000/B000/s3cretPath?token=abc123"


@pytest.fixture
def page_for(db: None) -> Callable[..., str]:
    model = monitored_model("sea", reference_rows=300, window_size=200, min_samples=100, min_labels=100)
    MonitoringPolicy.objects.filter(model=model).update(webhook_url=HOOK)

    def page(*, staff: bool) -> str:
        client = Client()
        user = User.objects.create_user(f"u{staff}", password="pw-user-12345", is_staff=staff)
        client.force_login(user)
        response = client.get("/models/sea/")
        assert response.status_code == 200
        return response.content.decode()

    return page


def test_a_non_staff_user_sees_nothing_of_the_webhook(page_for: Callable[..., str]) -> None:
    page = page_for(staff=False)
    assert "hooks.example.com" not in page and "s3cretPath" not in page and "abc123" not in page


def test_staff_see_the_webhook_host_only(page_for: Callable[..., str]) -> None:
    page = page_for(staff=True)
    assert "webhook to hooks.example.com" in page
    assert "s3cretPath" not in page and "abc123" not in page


def test_slack_and_pagerduty_show_their_hosts_to_staff_only() -> None:
    from dashboard.presenters import notify_text
    from monitoring.models import MonitoringPolicy

    policy = MonitoringPolicy(
        slack_webhook_url="https://hooks.slack.com/services/T0/B0/secret-path",
        pagerduty_routing_key="k",
    )
    staff = notify_text(policy=policy, staff=True)
    assert staff == "Slack webhook to hooks.slack.com, PagerDuty via events.pagerduty.com"
    assert "secret-path" not in staff
    assert notify_text(policy=policy, staff=False) == "—"
