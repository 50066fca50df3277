"""Delivers one notification: e-mail through Django's mail backend, a signed webhook, a
Slack-compatible incoming webhook or a PagerDuty Events v2 event (bodies: monitoring.destinations)."""

import hashlib
import hmac
import http.client
import json
import logging
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from django.core.mail import send_mail
from django.db.models import Q
from django.utils import timezone

from core import outbound
from core.enqueue import enqueue
from monitoring.destinations import alert_title, pagerduty_payload, slack_payload
from monitoring.models import MonitoringPolicy, Notification, NotificationState
from monitoring.selectors import policy_for
from monitoring.serializers import AlertOut
from workers import queues

MAX_ATTEMPTS = 6  # the first try and the task's 5 retries
STUCK_AFTER = timedelta(minutes=5)
SIGNATURE_HEADER = "X-Driftwatch-Signature"
TIMESTAMP_HEADER = "X-Driftwatch-Timestamp"

logger = logging.getLogger(__name__)


class TransientDeliveryError(Exception):
    """Worth retrying: a network error, a timeout or a 5xx/429 from the receiver."""


class DeliveryRefused(Exception):
    """Not worth retrying: the receiver refused (4xx, a redirect) or the target is unsafe."""


def webhook_signature(secret: str, timestamp: str, body: bytes) -> str:
    """sha256=HMAC(secret, "<timestamp>.<body>"): the timestamp guards against replays."""
    digest = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    return f"sha256={digest}"


def _payload(notification: Notification) -> dict[str, Any]:
    return {"event": notification.event, "alert": AlertOut(notification.alert).data}


def _send_webhook(notification: Notification, policy: MonitoringPolicy) -> None:
    body = json.dumps(_payload(notification), sort_keys=True).encode()
    timestamp = str(int(time.time()))
    headers = {"Content-Type": "application/json", TIMESTAMP_HEADER: timestamp}
    if policy.webhook_secret:
        headers[SIGNATURE_HEADER] = webhook_signature(policy.webhook_secret, timestamp, body)
    webhook_post(notification.target, body, headers)


def _post_json(url: str, payload: dict[str, Any]) -> None:
    webhook_post(url, json.dumps(payload).encode(), {"Content-Type": "application/json"})


def _send_slack(notification: Notification, policy: MonitoringPolicy) -> None:
    _post_json(notification.target, slack_payload(notification.alert, notification.event))


def _send_pagerduty(notification: Notification, policy: MonitoringPolicy) -> None:
    if not policy.pagerduty_routing_key:
        raise DeliveryRefused("the policy no longer has a PagerDuty routing key")
    payload = pagerduty_payload(notification.alert, notification.event, policy.pagerduty_routing_key)
    _post_json(notification.target, payload)


def webhook_post(url: str, body: bytes, headers: dict[str, str]) -> None:
    """POST to a checked target (core.outbound: no private address, no redirect).
    TransientDeliveryError for what a retry may fix (network, 5xx, 429); DeliveryRefused else."""
    try:
        status = outbound.post(url, body, headers, timeout=10)
    except (OSError, http.client.HTTPException) as exc:
        raise TransientDeliveryError(str(exc) or type(exc).__name__) from exc
    if status >= 500 or status == 429:
        raise TransientDeliveryError(f"HTTP {status}")
    if 300 <= status < 400:
        raise DeliveryRefused(f"HTTP {status}: redirects are not followed")
    if status >= 400:  # the receiver refuses it; retrying cannot help
        raise DeliveryRefused(f"HTTP {status}")


def _send_email(notification: Notification, policy: MonitoringPolicy) -> None:
    alert = notification.alert
    subject = alert_title(alert, notification.event)
    try:
        send_mail(
            subject,
            f"{alert.message}\n\n{json.dumps(_payload(notification), indent=2)}",
            None,
            [notification.target],
        )
    except OSError as exc:  # SMTP connection problems are OSErrors
        raise TransientDeliveryError(str(exc)) from exc


# channel -> sender (each raises TransientDeliveryError to retry, anything else to give up)
SENDERS: dict[str, Callable[[Notification, MonitoringPolicy], None]] = {
    "email": _send_email,
    "webhook": _send_webhook,
    "slack": _send_slack,
    "pagerduty": _send_pagerduty,
}


def notification_deliver(*, notification_id: int) -> str:
    """Claim, send, record. Returns the final state; raises TransientDeliveryError to retry."""
    claimed = Notification.objects.filter(
        pk=notification_id,
        state__in=[NotificationState.PENDING, NotificationState.FAILED],
        attempts__lt=MAX_ATTEMPTS,
    ).update(state=NotificationState.SENDING, claimed_at=timezone.now())
    if not claimed:
        return "skipped"
    notification = Notification.objects.select_related("alert__model").get(pk=notification_id)
    try:
        SENDERS[notification.channel](notification, policy_for(notification.alert.model))
    except Exception as exc:
        Notification.objects.filter(pk=notification_id).update(
            state=NotificationState.FAILED, attempts=notification.attempts + 1, last_error=str(exc)[:2000]
        )
        logger.warning(
            "notification failed: notification=%s alert=%s channel=%s attempt=%s: %s",
            notification_id,
            notification.alert_id,
            notification.channel,
            notification.attempts + 1,
            exc,
        )
        raise
    Notification.objects.filter(pk=notification_id).update(
        state=NotificationState.SENT,
        attempts=notification.attempts + 1,
        sent_at=timezone.now(),
        last_error="",
    )
    logger.info(
        "notification sent: notification=%s alert=%s channel=%s event=%s",
        notification_id,
        notification.alert_id,
        notification.channel,
        notification.event,
    )
    return NotificationState.SENT


def notifications_reap_stuck(*, now: datetime | None = None) -> int:
    """Re-enqueue deliveries whose message was lost (pending too long) or whose worker died
    mid-send (sending too long). A resent e-mail is possible after a crash; a lost one is not."""
    now = now or timezone.now()
    Notification.objects.filter(state=NotificationState.SENDING, claimed_at__lt=now - STUCK_AFTER).update(
        state=NotificationState.FAILED, last_error="worker died while sending"
    )
    stuck = Notification.objects.filter(attempts__lt=MAX_ATTEMPTS).filter(
        Q(state=NotificationState.PENDING, created_at__lt=now - STUCK_AFTER)
        | Q(state=NotificationState.FAILED, last_error="worker died while sending")
    )
    ids = list(stuck.values_list("pk", flat=True))
    for pk in ids:
        enqueue(queues.DELIVER_NOTIFICATION, args=[pk])
        logger.warning("reaper: notification=%s re-enqueued", pk)
    return len(ids)
