"""Slack-compatible and PagerDuty Events v2 destinations, delivered to local HTTP servers that
check each body's shape the way the real receivers do."""

import json
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from monitoring.alerts import alert_resolve, notifications_create
from monitoring.models import Alert, MonitoringPolicy, Notification
from monitoring.notify import DeliveryRefused, TransientDeliveryError, notification_deliver
from tests.platform.monitoring.factories import monitored_model
from tests.platform.monitoring.test_notifications import Receiver

pytestmark = pytest.mark.usefixtures("private_webhooks_allowed")

PD_ACTIONS = {"trigger", "acknowledge", "resolve"}
PD_SEVERITIES = {"critical", "error", "warning", "info"}


def pagerduty_problems(body: dict[str, Any]) -> list[str]:
    """What PagerDuty's Events v2 API would answer 400 for (its documented required fields)."""
    problems = [f"missing {k}" for k in ("routing_key", "event_action", "dedup_key") if not body.get(k)]
    if body.get("event_action") not in PD_ACTIONS:
        problems.append("bad event_action")
    if body.get("event_action") == "trigger":
        payload = body.get("payload") or {}
        problems += [f"missing payload.{k}" for k in ("summary", "source", "severity") if not payload.get(k)]
        if payload.get("severity") not in PD_SEVERITIES:
            problems.append("bad payload.severity")
        if len(payload.get("summary", "")) > 1024:
            problems.append("payload.summary too long")
    return problems


def slack_problems(body: dict[str, Any]) -> list[str]:
    """An incoming webhook answers 400 'no_text' without text (or blocks/attachments)."""
    if not (body.get("text") or body.get("attachments") or body.get("blocks")):
        return ["no_text"]
    return [
        f"attachment without fallback text: {a}" for a in body.get("attachments", []) if not a.get("text")
    ]


class CheckingReceiver(Receiver):
    """Answers 400 when the body breaks the receiver's rules, else the next status (or 202)."""

    def __init__(self, rules: Any, statuses: list[int] | None = None) -> None:
        super().__init__(statuses or [])
        self.rules = rules

    def answer(self, body: bytes) -> int:
        problems = self.rules(json.loads(body))
        if problems:
            return 400
        return self.statuses.pop(0) if self.statuses else 202


@pytest.fixture
def pagerduty() -> Iterator[CheckingReceiver]:
    r = CheckingReceiver(pagerduty_problems)
    yield r
    r.server.shutdown()


@pytest.fixture
def slack() -> Iterator[CheckingReceiver]:
    r = CheckingReceiver(slack_problems)
    yield r
    r.server.shutdown()


def alert_with(**policy: Any) -> Alert:
    model = monitored_model()
    MonitoringPolicy.objects.filter(model=model).update(**policy)
    return Alert.objects.create(
        model=model,
        kind="accuracy_drop",
        severity="critical",
        message="accuracy 0.61 < 0.85",
        opened_at=timezone.now(),
    )


def bodies(receiver: Receiver) -> list[dict[str, Any]]:
    return [json.loads(body) for _, body in receiver.requests]


def deliver_all(alert: Alert, event: str) -> list[str]:
    return [notification_deliver(notification_id=n.pk) for n in alert.notifications.filter(event=event)]


@pytest.mark.django_db
def test_pagerduty_gets_a_trigger_then_a_resolve_with_one_dedup_key(pagerduty: CheckingReceiver) -> None:
    alert = alert_with(pagerduty_routing_key="R0UTING", pagerduty_url=pagerduty.url)
    notifications_create(alert=alert, policy=MonitoringPolicy.objects.get(model=alert.model), event="opened")
    assert deliver_all(alert, "opened") == ["sent"]
    assert alert_resolve(alert=alert)
    assert deliver_all(alert, "resolved") == ["sent"]
    trigger, resolve = bodies(pagerduty)
    assert [pagerduty_problems(trigger), pagerduty_problems(resolve)] == [[], []]
    assert (trigger["event_action"], resolve["event_action"]) == ("trigger", "resolve")
    assert trigger["dedup_key"] == resolve["dedup_key"] == f"driftwatch-alert-{alert.pk}"
    assert trigger["routing_key"] == resolve["routing_key"] == "R0UTING"
    assert trigger["payload"]["severity"] == "critical"
    assert alert.model.name in trigger["payload"]["summary"]
    assert trigger["links"][0]["href"].endswith(f"/models/{alert.model.name}/")


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("ours", "theirs"), [("info", "info"), ("warning", "warning"), ("critical", "critical")]
)
def test_pagerduty_severity_maps_from_the_alerts(pagerduty: CheckingReceiver, ours: str, theirs: str) -> None:
    alert = alert_with(pagerduty_routing_key="k", pagerduty_url=pagerduty.url)
    Alert.objects.filter(pk=alert.pk).update(severity=ours)
    note = Notification.objects.create(alert=alert, event="opened", channel="pagerduty", target=pagerduty.url)
    assert notification_deliver(notification_id=note.pk) == "sent"
    assert bodies(pagerduty)[0]["payload"]["severity"] == theirs


@pytest.mark.django_db
def test_a_long_message_is_cut_to_pagerdutys_summary_limit(pagerduty: CheckingReceiver) -> None:
    alert = alert_with(pagerduty_routing_key="k", pagerduty_url=pagerduty.url)
    Alert.objects.filter(pk=alert.pk).update(message="x" * 5000)
    note = Notification.objects.create(alert=alert, event="opened", channel="pagerduty", target=pagerduty.url)
    assert notification_deliver(notification_id=note.pk) == "sent"
    assert len(bodies(pagerduty)[0]["payload"]["summary"]) == 1024


@pytest.mark.django_db
def test_pagerduty_429_is_retried_and_a_400_is_not(pagerduty: CheckingReceiver) -> None:
    alert = alert_with(pagerduty_routing_key="k", pagerduty_url=pagerduty.url)
    pagerduty.statuses[:] = [429, 400]
    note = Notification.objects.create(alert=alert, event="opened", channel="pagerduty", target=pagerduty.url)
    with pytest.raises(TransientDeliveryError):
        notification_deliver(notification_id=note.pk)
    with pytest.raises(DeliveryRefused):
        notification_deliver(notification_id=note.pk)
    assert Notification.objects.get(pk=note.pk).last_error == "HTTP 400"


@pytest.mark.django_db
def test_slack_gets_a_message_linking_to_the_model_page(slack: CheckingReceiver) -> None:
    alert = alert_with(slack_webhook_url=slack.url)
    notifications_create(alert=alert, policy=MonitoringPolicy.objects.get(model=alert.model), event="opened")
    assert deliver_all(alert, "opened") == ["sent"]
    (body,) = bodies(slack)
    assert slack_problems(body) == []
    attachment = body["attachments"][0]
    assert attachment["text"] == "accuracy 0.61 < 0.85"
    assert attachment["title_link"].endswith(f"/models/{alert.model.name}/")
    assert f"/models/{alert.model.name}/|" in body["text"]


@pytest.mark.django_db
def test_every_configured_destination_gets_one_notification() -> None:
    alert = alert_with(
        notify_emails="a@example.com",
        webhook_url="http://127.0.0.1:9/w",
        slack_webhook_url="http://127.0.0.1:9/s",
        pagerduty_routing_key="k",
        pagerduty_url="http://127.0.0.1:9/pd",
    )
    policy = MonitoringPolicy.objects.get(model=alert.model)
    notifications_create(alert=alert, policy=policy, event="opened")
    notifications_create(alert=alert, policy=policy, event="opened")  # twice: still one each
    channels = sorted(alert.notifications.values_list("channel", "target"))
    assert channels == [
        ("email", "a@example.com"),
        ("pagerduty", "http://127.0.0.1:9/pd"),
        ("slack", "http://127.0.0.1:9/s"),
        ("webhook", "http://127.0.0.1:9/w"),
    ]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("field", "changes"),
    [
        ("slack_webhook_url", {"slack_webhook_url": "http://169.254.169.254/hook"}),
        ("pagerduty_url", {"pagerduty_routing_key": "k", "pagerduty_url": "http://169.254.169.254/x"}),
        ("slack_webhook_url", {"slack_webhook_url": "ftp://example.com/hook"}),
    ],
)
def test_destination_urls_follow_the_webhook_address_rules(field: str, changes: dict[str, str]) -> None:
    policy = MonitoringPolicy.objects.get(model=monitored_model())
    for name, value in changes.items():
        setattr(policy, name, value)
    with pytest.raises(ValidationError) as raised:
        policy.clean()
    assert field in raised.value.message_dict


@pytest.mark.django_db
def test_a_private_slack_url_is_refused_at_delivery_without_the_setting(settings: Any) -> None:
    alert = alert_with()
    settings.DRIFTWATCH_WEBHOOK_ALLOW_PRIVATE = False
    note = Notification.objects.create(
        alert=alert, event="opened", channel="slack", target="http://127.0.0.1:9/s"
    )
    with pytest.raises(Exception, match="loopback"):
        notification_deliver(notification_id=note.pk)
    assert Notification.objects.get(pk=note.pk).state == "failed"
