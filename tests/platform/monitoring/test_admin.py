"""The monitoring admin never shows a policy's webhook secret."""

import pytest
from django.contrib.auth.models import User
from django.test import Client

from monitoring.models import MonitoringPolicy
from tests.platform.conftest import make_model

SECRET = "whsec-do-not-show-4f1c9a"


@pytest.fixture
def policy(db: None) -> MonitoringPolicy:
    return MonitoringPolicy.objects.create(
        model=make_model(), webhook_url="https://hooks.example.com/x", webhook_secret=SECRET
    )


@pytest.fixture
def admin_client(db: None) -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("root", password="pw-root-12345"))
    return client


def change_url(policy: MonitoringPolicy) -> str:
    return f"/admin/monitoring/monitoringpolicy/{policy.pk}/change/"


def form_data(client: Client, policy: MonitoringPolicy, **changes: str) -> dict[str, str]:
    form = client.get(change_url(policy)).context["adminform"].form
    data = {name: form[name].value() for name in form.fields if form[name].value() is not None}
    data = {k: ("on" if v is True else v) for k, v in data.items() if v is not False}
    return {**data, **changes}


def test_policy_change_page_does_not_show_the_webhook_secret(
    admin_client: Client, policy: MonitoringPolicy
) -> None:
    page = admin_client.get(change_url(policy)).content.decode()
    assert "https://hooks.example.com/x" in page
    assert SECRET not in page


def test_saving_with_the_secret_left_blank_keeps_it(admin_client: Client, policy: MonitoringPolicy) -> None:
    response = admin_client.post(change_url(policy), form_data(admin_client, policy, webhook_secret=""))
    assert response.status_code == 302
    policy.refresh_from_db()
    assert policy.webhook_secret == SECRET


def test_a_new_secret_replaces_the_old_one(admin_client: Client, policy: MonitoringPolicy) -> None:
    admin_client.post(change_url(policy), form_data(admin_client, policy, webhook_secret="new-secret-1"))
    policy.refresh_from_db()
    assert policy.webhook_secret == "new-secret-1"


def test_policy_change_in_the_admin_is_audited_without_the_secret(
    admin_client: Client, policy: MonitoringPolicy
) -> None:
    from core.models import AuditEvent

    admin_client.post(change_url(policy), form_data(admin_client, policy, webhook_secret="new-secret-2"))
    event = AuditEvent.objects.get(action="policy.update")
    assert event.actor_label == "root"
    assert event.details["changes"]["webhook_secret"] == "(changed)"
    assert "new-secret-2" not in str(event.details)


def test_the_pagerduty_routing_key_is_write_only_too(admin_client: Client, policy: MonitoringPolicy) -> None:
    MonitoringPolicy.objects.filter(pk=policy.pk).update(pagerduty_routing_key="pd-key-do-not-show-77")
    page = admin_client.get(change_url(policy)).content.decode()
    assert "pd-key-do-not-show-77" not in page
    admin_client.post(change_url(policy), form_data(admin_client, policy, pagerduty_routing_key=""))
    policy.refresh_from_db()
    assert policy.pagerduty_routing_key == "pd-key-do-not-show-77"
    admin_client.post(change_url(policy), form_data(admin_client, policy, clear_pagerduty_routing_key="on"))
    policy.refresh_from_db()
    assert policy.pagerduty_routing_key == ""
