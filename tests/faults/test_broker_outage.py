"""Redis goes down: ingestion keeps accepting; checks, reports and alerts resume when it is back.

The broker is a private redis-server on a free port, killed mid-test; the database is the
suite's own test database.
"""

import json
from collections.abc import Iterator

import pytest
from django.contrib.auth import get_user_model

from core.models import OutboxMessage
from core.services import api_token_create
from monitoring.models import CheckState, Notification, NotificationState, PredictionSample, QualityCheck
from registry.models import RegisteredModel
from tests.clock import T0
from tests.live import (
    PrivateRedis,
    celery_worker,
    child_env,
    django_database_url,
    http,
    manage,
    needs,
    wait_until,
    web_server,
)
from tests.platform.conftest import make_model, make_sample
from tests.platform.monitoring.factories import monitored_model, rows, send
from workers import queues


@pytest.fixture
def redis_server() -> Iterator[PrivateRedis]:
    needs("redis-server")
    server = PrivateRedis()
    try:
        server.start()
        yield server
    finally:
        server.close()


@pytest.fixture
def churn_live(transactional_db: None) -> RegisteredModel:
    return make_model()


def test_ingestion_keeps_accepting_while_the_broker_is_down(
    redis_server: PrivateRedis, churn_live: RegisteredModel
) -> None:
    user = get_user_model().objects.create_user("feeder")
    token = api_token_create(user=user, scope="ingest")[1]
    env = child_env(DATABASE_URL=django_database_url(), REDIS_URL=redis_server.url())
    with web_server(env) as base:
        redis_server.kill()
        assert http("GET", base + "/healthz")[0] == 503
        for batch in range(5):
            samples = [make_sample(batch * 100 + i) for i in range(100)]
            status, body = http("POST", base + "/api/v1/models/churn/predictions",
                                json.dumps({"samples": samples}).encode(), token)  # fmt: skip
            assert (status, json.loads(body)) == (200, {"accepted": 100, "duplicates": 0})
            labels = [{"id": s["id"], "label": "yes"} for s in samples]
            status, body = http("POST", base + "/api/v1/models/churn/labels",
                                json.dumps({"labels": labels}).encode(), token)  # fmt: skip
            assert (status, json.loads(body)) == (200, {"matched": 100, "pending": 0})
    assert PredictionSample.objects.filter(model=churn_live).count() == 500


@pytest.fixture
def drifted_live(transactional_db: None) -> RegisteredModel:
    model = monitored_model(notify_emails="ops@example.com")
    send(model, rows(500, seed=2, shift=2.0), start=T0, prefix="a")  # drifts: opens alerts
    return model


def test_checks_reports_and_alerts_during_a_broker_outage_all_happen_once_it_is_back(
    redis_server: PrivateRedis, drifted_live: RegisteredModel
) -> None:
    token = api_token_create(user=get_user_model().objects.create_user("checker"), scope="ingest")[1]
    env = child_env(DATABASE_URL=django_database_url(), REDIS_URL=redis_server.url())
    redis_server.kill()
    with web_server(env) as base:
        status, body = http("POST", base + f"/api/v1/models/{drifted_live.name}/checks", b"{}", token)
    assert status == 201, body[:500]
    check = json.loads(body)
    assert (check["state"], check["error"]) == ("done", None)  # finished, not failed by the broker
    # A beat dispatch and a report request while the broker is down.
    manage(env, "shell", "-c", DURING_OUTAGE.format(check_id=check["id"]))
    kept = set(OutboxMessage.objects.values_list("name", flat=True))
    assert kept == {queues.CHECK_MODEL, queues.RENDER_REPORT, queues.DELIVER_NOTIFICATION}

    redis_server.start()
    with celery_worker(env):
        manage(env, "shell", "-c", "from core.enqueue import outbox_flush; outbox_flush()")
        checks = QualityCheck.objects.filter(model=drifted_live)
        wait_until(lambda: checks.filter(state=CheckState.DONE).count() == 2, 120, what="dispatched check")
        wait_until(lambda: bool(checks.get(pk=check["id"]).report), 120, what="report")
        notes = Notification.objects.filter(alert__model=drifted_live)
        wait_until(lambda: not notes.exclude(state=NotificationState.SENT).exists(), 60, what="alerts sent")
    assert notes.exists() and not OutboxMessage.objects.exists()
    assert checks.count() == 2 and not checks.exclude(state=CheckState.DONE).exists()


DURING_OUTAGE = """
from monitoring.models import QualityCheck
from monitoring.reports import check_report_request
from monitoring.scheduling import checks_dispatch_due
assert checks_dispatch_due() == 1
check_report_request(check=QualityCheck.objects.get(pk={check_id}))
"""
