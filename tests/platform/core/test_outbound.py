"""Webhooks cannot be pointed at the platform's own network: only http(s) to public addresses
(unless the operator allows private ones), the checked address is the one connected to, and
redirects are never followed."""

import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import pytest
from django.test import Client

from core.outbound import UnsafeTarget, target_problem, target_resolve
from monitoring.models import MonitoringPolicy, Notification
from monitoring.notify import notification_deliver
from tests.platform.monitoring.test_admin import change_url, form_data
from tests.platform.monitoring.test_notifications import Receiver, open_alert

REFUSED = [
    ("http://127.0.0.1:8000/hook", "loopback"),
    ("http://localhost/hook", "loopback"),  # a name that resolves to loopback
    ("http://0.0.0.0/", "unspecified"),
    ("http://[::1]/", "loopback"),
    ("http://[::ffff:127.0.0.1]/", "loopback"),
    ("http://169.254.169.254/latest/meta-data/", "link-local"),
    ("http://10.1.2.3/", "private"),
    ("http://192.168.0.1/", "private"),
    ("http://224.0.0.1/", "multicast"),
    ("http://240.0.0.1/", "reserved"),
    ("ftp://example.com/x", "only http and https"),
    ("file:///etc/passwd", "only http and https"),
    ("gopher://127.0.0.1:6379/_INFO", "only http and https"),
]


@pytest.mark.parametrize(("url", "why"), REFUSED)
def test_an_unsafe_webhook_target_is_refused_with_the_reason(url: str, why: str) -> None:
    problem = target_problem(url)
    assert problem is not None and why in problem


def test_a_public_address_is_accepted() -> None:
    assert target_problem("https://93.184.215.14/hook") is None


def test_link_local_stays_refused_when_private_targets_are_allowed() -> None:
    with pytest.raises(UnsafeTarget, match="link-local"):
        target_resolve("http://169.254.169.254/", allow_private=True)
    assert target_resolve("http://127.0.0.1:9/", allow_private=True).address == "127.0.0.1"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver([])
    yield r
    r.server.shutdown()


@pytest.mark.django_db
def test_a_local_receiver_is_refused_by_default_and_never_contacted(receiver: Receiver) -> None:
    alert = open_alert()
    note = Notification.objects.create(alert=alert, event="opened", channel="webhook", target=receiver.url)
    with pytest.raises(UnsafeTarget):
        notification_deliver(notification_id=note.pk)
    note.refresh_from_db()
    assert note.state == "failed" and "loopback" in note.last_error
    assert receiver.requests == []


@pytest.mark.django_db
def test_a_local_receiver_is_reached_when_private_targets_are_allowed(
    receiver: Receiver, private_webhooks_allowed: None
) -> None:
    alert = open_alert()
    note = Notification.objects.create(alert=alert, event="opened", channel="webhook", target=receiver.url)
    assert notification_deliver(notification_id=note.pk) == "sent"
    assert len(receiver.requests) == 1


class Redirector:
    """Answers every POST with a 302 to ``location``."""

    def __init__(self, location: str) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                self.send_response(302)
                self.send_header("Location", location)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.mark.django_db
def test_a_redirect_is_not_followed(receiver: Receiver, private_webhooks_allowed: None) -> None:
    redirector = Redirector(receiver.url)
    try:
        alert = open_alert()
        note = Notification.objects.create(
            alert=alert, event="opened", channel="webhook", target=redirector.url
        )
        with pytest.raises(Exception, match="redirects are not followed"):
            notification_deliver(notification_id=note.pk)
    finally:
        redirector.server.shutdown()
    assert receiver.requests == []
    assert "302" in Notification.objects.get(pk=note.pk).last_error


@pytest.mark.django_db
def test_the_host_is_resolved_once_and_the_checked_address_is_connected_to(
    receiver: Receiver, private_webhooks_allowed: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A DNS rebinding answer (public first, loopback next) cannot reach the second address."""
    real = socket.getaddrinfo
    calls: list[str] = []

    def counting(host: str, *args: Any, **kwargs: Any) -> Any:
        calls.append(host)
        return real("127.0.0.1", *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", counting)
    url = receiver.url.replace("127.0.0.1", "hooks.internal.test")
    alert = open_alert()
    note = Notification.objects.create(alert=alert, event="opened", channel="webhook", target=url)
    assert notification_deliver(notification_id=note.pk) == "sent"
    assert calls.count("hooks.internal.test") == 1
    assert set(calls) <= {"hooks.internal.test", "127.0.0.1"}  # the connect gets the checked address
    assert receiver.requests[0][0]["Host"].startswith("hooks.internal.test")


@pytest.fixture
def admin_client(db: None) -> Client:
    from django.contrib.auth.models import User

    client = Client()
    client.force_login(User.objects.create_superuser("root", password="pw-root-12345"))
    return client


@pytest.mark.parametrize(("url", "why"), [REFUSED[0], REFUSED[5], REFUSED[10]])
def test_the_admin_form_refuses_an_unsafe_webhook_and_says_why(
    admin_client: Client, url: str, why: str
) -> None:
    from tests.platform.conftest import make_model

    policy = MonitoringPolicy.objects.create(model=make_model())
    response = admin_client.post(change_url(policy), form_data(admin_client, policy, webhook_url=url))
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert why in " ".join(errors.get("webhook_url", []))
    policy.refresh_from_db()
    assert policy.webhook_url == ""


@pytest.mark.django_db
def test_the_retraining_webhook_refuses_an_unsafe_target_without_connecting(receiver: Receiver) -> None:
    from retraining.models import RetrainJob
    from retraining.webhooks import webhook_deliver
    from tests.platform.retraining.factories import retrainable_model

    model = retrainable_model()
    MonitoringPolicy.objects.filter(model=model).update(webhook_url=receiver.url)
    job = RetrainJob.objects.create(model=model, trigger="api")
    assert "loopback" in webhook_deliver(job_id=job.pk, event="champion.promoted")
    assert receiver.requests == []
