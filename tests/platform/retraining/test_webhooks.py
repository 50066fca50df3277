import hashlib
import hmac
import json
from collections.abc import Iterator

import pytest

from monitoring.models import MonitoringPolicy
from monitoring.notify import SIGNATURE_HEADER, TIMESTAMP_HEADER
from retraining.webhooks import webhook_deliver
from tests.platform.monitoring.test_notifications import Receiver
from tests.platform.retraining.factories import drifted_model, run

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("private_webhooks_allowed")]


@pytest.fixture
def hook() -> Iterator[Receiver]:
    r = Receiver([])
    yield r
    r.server.shutdown()


def test_promotion_webhook_is_signed_and_points_at_the_champion_artifact(hook: Receiver) -> None:
    model = drifted_model()
    MonitoringPolicy.objects.filter(model=model).update(webhook_url=hook.url, webhook_secret="k")
    job = run(model)
    assert webhook_deliver(job_id=job.pk, event="champion.promoted") == "sent"
    headers, body = hook.requests[0]
    expected = hmac.new(b"k", headers[TIMESTAMP_HEADER].encode() + b"." + body, hashlib.sha256).hexdigest()
    assert headers[SIGNATURE_HEADER] == f"sha256={expected}"
    payload = json.loads(body)
    assert payload["event"] == "champion.promoted" and payload["champion"] == job.result_version.version
    assert payload["artifact_url"] == "/api/v1/models/concept/champion/artifact"
