"""An alert e-mail really goes out over SMTP when SMTP is configured through the environment:
a worker process started with DRIFTWATCH_EMAIL_* delivers to a real SMTP server (aiosmtpd)."""

import email
import email.policy
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, AuthResult, Envelope, LoginPassword, Session

from monitoring.models import Notification
from tests.live import ROOT, child_env, django_database_url, free_port
from tests.platform.monitoring.test_notifications import open_alert

USER, PASSWORD = "alerts", "s3cret-pw"
# Plain-text AUTH on loopback, on purpose: aiosmtpd warns about it.
pytestmark = pytest.mark.filterwarnings("ignore:Requiring AUTH while not requiring TLS:UserWarning")


@dataclass
class Inbox:
    """An SMTP server that requires a login and keeps every message it accepts."""

    messages: list[Envelope] = field(default_factory=list)
    logins: list[bytes] = field(default_factory=list)

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:  # noqa: N802
        self.messages.append(envelope)
        return "250 Message accepted for delivery"

    def authenticate(
        self, server: SMTP, session: Session, envelope: Envelope, mechanism: str, data: Any
    ) -> AuthResult:
        expected = (USER.encode(), PASSWORD.encode())
        ok = isinstance(data, LoginPassword) and (data.login, data.password) == expected
        if ok:
            self.logins.append(data.login)
        return AuthResult(success=ok, handled=False)  # handled=False: the server answers 535


@pytest.fixture
def inbox() -> Iterator[tuple[Inbox, int]]:
    box, port = Inbox(), free_port()
    # The server refuses mail from anyone not logged in: a delivery proves the credentials were sent.
    controller = Controller(
        box,
        hostname="127.0.0.1",
        port=port,
        authenticator=box.authenticate,
        auth_required=True,
        auth_require_tls=False,
    )
    controller.start()
    yield box, port
    controller.stop()


def deliver_in_a_worker_process(notification_id: int, **env: str) -> subprocess.CompletedProcess[str]:
    code = f"from monitoring.notify import notification_deliver; print(notification_deliver(notification_id={notification_id}))"
    return subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", code],
        cwd=ROOT,
        env=child_env(DATABASE_URL=django_database_url(), **env),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_alert_email_goes_out_over_smtp_configured_from_the_environment(
    transactional_db: None, inbox: tuple[Inbox, int]
) -> None:
    box, port = inbox
    alert = open_alert()
    note = Notification.objects.create(alert=alert, event="opened", channel="email", target="ops@example.com")
    result = deliver_in_a_worker_process(
        note.pk,
        DRIFTWATCH_EMAIL_HOST="127.0.0.1",
        DRIFTWATCH_EMAIL_PORT=str(port),
        DRIFTWATCH_EMAIL_HOST_USER=USER,
        DRIFTWATCH_EMAIL_HOST_PASSWORD=PASSWORD,
        DRIFTWATCH_FROM_EMAIL="driftwatch@example.com",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "sent"
    assert box.logins == [USER.encode()]
    [envelope] = box.messages
    assert (envelope.mail_from, envelope.rcpt_tos) == ("driftwatch@example.com", ["ops@example.com"])
    message = email.message_from_bytes(envelope.original_content or b"", policy=email.policy.default)
    assert message["Subject"] == f"[driftwatch] accuracy_drop opened on {alert.model.name} ({alert.severity})"
    assert '"kind": "accuracy_drop"' in message.get_body().get_content()  # type: ignore[union-attr]
    assert Notification.objects.get(pk=note.pk).state == "sent"


def test_a_wrong_smtp_password_fails_the_delivery_and_records_the_error(
    transactional_db: None, inbox: tuple[Inbox, int]
) -> None:
    box, port = inbox
    note = Notification.objects.create(
        alert=open_alert(), event="opened", channel="email", target="ops@example.com"
    )
    result = deliver_in_a_worker_process(
        note.pk,
        DRIFTWATCH_EMAIL_HOST="127.0.0.1",
        DRIFTWATCH_EMAIL_PORT=str(port),
        DRIFTWATCH_EMAIL_HOST_USER=USER,
        DRIFTWATCH_EMAIL_HOST_PASSWORD="wrong",
    )
    assert result.returncode != 0
    assert box.messages == []
    failed = Notification.objects.get(pk=note.pk)
    assert failed.state == "failed" and "535" in failed.last_error
