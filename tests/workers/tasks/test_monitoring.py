"""The monitoring tasks' own behaviour (the services they call are tested in tests/platform)."""

import pytest

from monitoring.models import Notification, NotificationState
from monitoring.notify import MAX_ATTEMPTS, TransientDeliveryError
from tests.platform.monitoring.test_notifications import Receiver, open_alert
from workers.tasks.monitoring import deliver_notification

pytestmark = pytest.mark.usefixtures("private_webhooks_allowed")


@pytest.mark.django_db
def test_a_failing_webhook_is_retried_by_celery_until_max_retries() -> None:
    receiver = Receiver([503] * 10)
    try:
        alert = open_alert(webhook_url=receiver.url)
        note = Notification.objects.create(
            alert=alert, event="opened", channel="webhook", target=receiver.url
        )
        result = deliver_notification.apply(args=[note.pk])  # eager: the retries run at once
    finally:
        receiver.server.shutdown()
    assert isinstance(result.result, TransientDeliveryError)
    assert len(receiver.requests) == MAX_ATTEMPTS == deliver_notification.max_retries + 1
    note.refresh_from_db()
    assert (note.state, note.attempts) == (NotificationState.FAILED, MAX_ATTEMPTS)


@pytest.mark.django_db
def test_a_refused_webhook_is_not_retried() -> None:
    receiver = Receiver([410])
    try:
        alert = open_alert(webhook_url=receiver.url)
        note = Notification.objects.create(
            alert=alert, event="opened", channel="webhook", target=receiver.url
        )
        result = deliver_notification.apply(args=[note.pk])
    finally:
        receiver.server.shutdown()
    assert result.result == "failed" and len(receiver.requests) == 1
