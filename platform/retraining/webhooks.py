"""Serving systems learn about a new champion: a signed webhook on promotion and rollback.

Same signature as the alert webhooks (``X-Driftwatch-Signature: sha256=HMAC(secret,
"<timestamp>.<body>")``), to the monitoring policy's webhook URL. The body says where the
champion's artifact and recipe download (API, ``read`` scope).
"""

import json
import time
from typing import Any

from django.urls import reverse

from core.enqueue import enqueue
from core.outbound import UnsafeTarget
from monitoring.notify import (
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    DeliveryRefused,
    webhook_post,
    webhook_signature,
)
from monitoring.selectors import policy_for
from registry.models import ModelVersion, VersionStatus
from retraining.models import RetrainJob
from workers import queues


def webhook_fire(*, job: RetrainJob, event: str) -> bool:
    """Enqueue the delivery after commit, if the model's policy has a webhook URL."""
    if not policy_for(job.model).webhook_url:
        return False
    enqueue(queues.RETRAIN_WEBHOOK, args=[job.pk, event])
    return True


def webhook_payload(job: RetrainJob, event: str) -> dict[str, Any]:
    champion = ModelVersion.objects.filter(model=job.model, status=VersionStatus.CHAMPION).first()
    name = job.model.name
    return {
        "event": event,
        "model": name,
        "job": job.pk,
        "champion": champion.version if champion else None,
        "artifact_sha256": champion.artifact_sha256 if champion else None,
        "champion_url": reverse("api-champion", args=[name]),
        "artifact_url": reverse("api-champion-artifact", args=[name]),
    }


def webhook_deliver(*, job_id: int, event: str) -> str:
    """POST the signed event; TransientDeliveryError (network, 5xx, 429) is retried by the task,
    a refusal (4xx, a redirect, an unsafe target) is answered "refused: why"."""
    job = RetrainJob.objects.select_related("model").filter(pk=job_id).first()
    if job is None:
        return "missing"
    policy = policy_for(job.model)
    body = json.dumps(webhook_payload(job, event), sort_keys=True).encode()
    timestamp = str(int(time.time()))
    headers = {"Content-Type": "application/json", TIMESTAMP_HEADER: timestamp}
    if policy.webhook_secret:
        headers[SIGNATURE_HEADER] = webhook_signature(policy.webhook_secret, timestamp, body)
    try:
        webhook_post(policy.webhook_url, body, headers)
    except (DeliveryRefused, UnsafeTarget) as exc:
        return f"refused: {exc}"
    return "sent"
