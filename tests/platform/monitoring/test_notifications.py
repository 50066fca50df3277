import hashlib
import hmac
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import pytest
from django.core import mail

from monitoring.models import Alert, MonitoringPolicy, Notification
from monitoring.notify import SIGNATURE_HEADER, TIMESTAMP_HEADER, TransientDeliveryError, notification_deliver
from tests.clock import T0
from tests.platform.monitoring.factories import monitored_model


class Receiver:
    """A local webhook receiver that answers each POST with the next status in `statuses`."""

    def __init__(self, statuses: list[int]) -> None:
        self.statuses = statuses
        self.requests: list[tuple[dict[str, str], bytes]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.requests.append((dict(self.headers), body))
                self.send_response(receiver.answer(body))
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def answer(self, body: bytes) -> int:
        return self.statuses.pop(0) if self.statuses else 200


pytestmark = pytest.mark.usefixtures("private_webhooks_allowed")


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver([500])
    yield r
    r.server.shutdown()


def open_alert(**policy: Any) -> Alert:
    from django.utils import timezone

    model = monitored_model()
    MonitoringPolicy.objects.filter(model=model).update(**policy)
    return Alert.objects.create(model=model, kind="accuracy_drop", message="m", opened_at=timezone.now())


@pytest.mark.django_db
def test_webhook_is_signed_and_retried_after_a_5xx(receiver: Receiver) -> None:
    alert = open_alert(webhook_url=receiver.url, webhook_secret="s3cret")
    note = Notification.objects.create(alert=alert, event="opened", channel="webhook", target=receiver.url)
    with pytest.raises(TransientDeliveryError):
        notification_deliver(notification_id=note.pk)
    assert Notification.objects.get(pk=note.pk).state == "failed"
    assert notification_deliver(notification_id=note.pk) == "sent"
    headers, body = receiver.requests[-1]
    expected = hmac.new(
        b"s3cret", headers[TIMESTAMP_HEADER].encode() + b"." + body, hashlib.sha256
    ).hexdigest()
    assert headers[SIGNATURE_HEADER] == f"sha256={expected}"
    assert json.loads(body)["alert"]["kind"] == "accuracy_drop"
    assert (Notification.objects.get(pk=note.pk).state, len(receiver.requests)) == ("sent", 2)


@pytest.mark.django_db
def test_a_sent_notification_is_not_sent_twice(receiver: Receiver) -> None:
    receiver.statuses.clear()
    alert = open_alert()
    note = Notification.objects.create(alert=alert, event="opened", channel="webhook", target=receiver.url)
    notification_deliver(notification_id=note.pk)
    assert notification_deliver(notification_id=note.pk) == "skipped"
    assert len(receiver.requests) == 1


@pytest.mark.django_db
def test_email_goes_through_djangos_mail_backend(settings: Any) -> None:
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    alert = open_alert()
    note = Notification.objects.create(alert=alert, event="opened", channel="email", target="ops@example.com")
    assert notification_deliver(notification_id=note.pk) == "sent"
    assert mail.outbox[0].to == ["ops@example.com"]
    assert "accuracy_drop" in mail.outbox[0].subject


@pytest.mark.django_db(transaction=True)
def test_opening_an_alert_creates_one_notification_per_target(settings: Any) -> None:
    from datetime import timedelta

    from monitoring.checks import quality_check_run
    from monitoring.window import scheduled_window
    from tests.platform.monitoring.factories import rows, send

    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    model = monitored_model(notify_emails="a@example.com, b@example.com")
    t0 = T0
    send(model, rows(1000, seed=3, flip=0.45), start=t0, prefix="bad")
    policy = MonitoringPolicy.objects.get(model=model)
    quality_check_run(model_id=model.pk, window=scheduled_window(policy, t0 + timedelta(hours=1)))
    targets = sorted(
        Notification.objects.filter(alert__kind="accuracy_drop").values_list("target", flat=True)
    )
    assert targets == ["a@example.com", "b@example.com"]


@pytest.mark.django_db(transaction=True)
def test_reaper_requeues_lost_and_interrupted_deliveries_but_not_sent_ones() -> None:
    from datetime import timedelta

    from django.utils import timezone

    from monitoring.notify import notifications_reap_stuck

    alert = open_alert()
    old = timezone.now() - timedelta(minutes=30)
    make = Notification.objects.create
    lost = make(alert=alert, event="opened", channel="email", target="lost@example.com")
    died = make(
        alert=alert,
        event="opened",
        channel="email",
        target="died@example.com",
        state="sending",
        claimed_at=old,
    )
    sent = make(alert=alert, event="opened", channel="email", target="sent@example.com", state="sent")
    spent = make(
        alert=alert, event="opened", channel="email", target="spent@example.com", state="failed", attempts=6
    )
    Notification.objects.filter(pk__in=[lost.pk, sent.pk, spent.pk]).update(created_at=old)
    assert notifications_reap_stuck() == 2
    assert Notification.objects.get(pk=died.pk).state == "failed"
    assert Notification.objects.get(pk=sent.pk).state == "sent"


@pytest.mark.django_db
def test_a_delivery_out_of_attempts_is_not_sent_again(settings: Any) -> None:
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    alert = open_alert()
    note = Notification.objects.create(
        alert=alert, event="opened", channel="email", target="x@example.com", state="failed", attempts=6
    )
    assert notification_deliver(notification_id=note.pk) == "skipped"
    assert mail.outbox == []
