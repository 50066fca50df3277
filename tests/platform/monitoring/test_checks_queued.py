"""A check asked for over a window larger than DRIFTWATCH_SYNC_CHECK_SAMPLES runs on a worker:
the API answers 202 with the queued check, and polling it gives what a check in the request gives."""

import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone
from rest_framework.test import APIClient

from monitoring.checks import stale_after
from monitoring.models import CheckState, QualityCheck
from monitoring.scheduling import checks_reap_stuck
from monitoring.window import range_window
from registry.models import RegisteredModel
from tests.clock import T0
from tests.platform.monitoring.factories import monitored_model, rows, send

WINDOW = {"start": T0.isoformat(), "end": (T0 + timedelta(minutes=5)).isoformat()}  # 300 samples
SAME = ("n_samples", "n_labelled", "metrics", "estimated", "drift", "prediction_drift", "decisions")


def sea(name: str) -> None:
    send(monitored_model(name), rows(600, seed=2, flip=0.45), start=T0, prefix="a")


def poll(client: APIClient, url: str, seconds: float = 120) -> dict[str, Any]:
    deadline = time.monotonic() + seconds
    while True:
        connection.close()  # the worker thread commits on its own connection
        response = client.get(url)
        assert response.status_code == 200, response.content[:300]
        body: dict[str, Any] = response.json()
        if body["state"] not in ("queued", "running") or time.monotonic() > deadline:
            return body
        time.sleep(0.3)


def test_a_window_above_the_threshold_answers_202_and_the_worker_gives_the_sync_result(
    celery_worker: object, client_for: Callable[[str], APIClient], settings: Any
) -> None:
    sea("sea")
    sea("sea-sync")  # the same traffic, checked in the request for comparison
    settings.DRIFTWATCH_SYNC_CHECK_SAMPLES = 299
    response = client_for("ingest").post("/api/v1/models/sea/checks", WINDOW, format="json")
    assert response.status_code == 202, response.content[:300]
    queued = response.json()
    assert queued["state"] == "queued" and queued["n_samples"] == 0
    assert response["Location"] == f"/api/v1/models/sea/checks/{queued['id']}"

    done = poll(client_for("read"), response["Location"])
    assert done["state"] == "done", done.get("error")
    assert done["id"] == queued["id"] and done["alerts_opened"], "the flipped traffic opens an alert"

    settings.DRIFTWATCH_SYNC_CHECK_SAMPLES = 300  # 300 samples: not above it, so in the request
    sync = client_for("ingest").post("/api/v1/models/sea-sync/checks", WINDOW, format="json")
    assert sync.status_code == 201, sync.content[:300]
    assert {k: done[k] for k in SAME} == {k: sync.json()[k] for k in SAME}

    again = client_for("ingest").post("/api/v1/models/sea/checks", WINDOW, format="json")
    assert (again.status_code, again.json()["id"]) == (200, queued["id"]), "a done window is not queued again"


def test_a_queued_window_posted_again_is_not_queued_twice(
    client_for: Callable[[str], APIClient], settings: Any, db: None
) -> None:
    sea("sea")
    settings.DRIFTWATCH_SYNC_CHECK_SAMPLES = 10
    first = client_for("ingest").post("/api/v1/models/sea/checks", WINDOW, format="json")
    second = client_for("ingest").post("/api/v1/models/sea/checks", WINDOW, format="json")
    assert (first.status_code, second.status_code) == (202, 202)
    assert first.json()["id"] == second.json()["id"]
    assert QualityCheck.objects.filter(model__name="sea").count() == 1


def test_a_window_at_the_threshold_is_checked_in_the_request(
    client_for: Callable[[str], APIClient], settings: Any, db: None
) -> None:
    sea("sea")
    settings.DRIFTWATCH_SYNC_CHECK_SAMPLES = 300
    response = client_for("ingest").post("/api/v1/models/sea/checks", WINDOW, format="json")
    assert response.status_code == 201, response.content[:300]
    assert (response.json()["state"], response.json()["n_samples"]) == ("done", 300)


@pytest.mark.parametrize(
    "body",
    [
        {"start": "__import__('os').system('true')", "end": WINDOW["end"]},
        {**WINDOW, "window": "lambda: 1"},
    ],
)
def test_what_a_client_sends_is_refused_never_evaluated_nor_queued(
    client_for: Callable[[str], APIClient], settings: Any, db: None, body: dict[str, str]
) -> None:
    sea("sea")
    settings.DRIFTWATCH_SYNC_CHECK_SAMPLES = 0
    response = client_for("ingest").post("/api/v1/models/sea/checks", body, format="json")
    assert response.status_code == 400, response.content[:300]
    assert not QualityCheck.objects.filter(model__name="sea").exists()


def test_a_check_of_another_model_is_not_found_under_this_one(
    client_for: Callable[[str], APIClient], settings: Any, db: None
) -> None:
    sea("sea")
    monitored_model("other")
    settings.DRIFTWATCH_SYNC_CHECK_SAMPLES = 10
    queued = client_for("ingest").post("/api/v1/models/sea/checks", WINDOW, format="json").json()
    assert client_for("read").get(f"/api/v1/models/sea/checks/{queued['id']}").status_code == 200
    assert client_for("read").get(f"/api/v1/models/other/checks/{queued['id']}").status_code == 404


def test_a_queued_check_whose_message_was_lost_is_requeued_by_the_reaper_and_done(
    celery_worker: object, client_for: Callable[[str], APIClient]
) -> None:
    sea("sea")
    window = range_window(T0, T0 + timedelta(minutes=5))
    long_ago = timezone.now() - stale_after() - timedelta(minutes=1)
    lost = QualityCheck.objects.create(
        model=RegisteredModel.objects.get(name="sea"),
        window_spec=window.spec,
        window_start=T0,
        window_end=window.end,
        state=CheckState.QUEUED,
        started_at=long_ago,
    )  # as check_enqueue leaves it, but no message was ever sent
    fresh = QualityCheck.objects.create(
        model=lost.model,
        window_spec="24h",
        window_start=T0,
        window_end=window.end,
        state=CheckState.QUEUED,
        started_at=timezone.now(),
    )  # queued a moment ago: its message is still on its way
    assert checks_reap_stuck() == 1
    done = poll(client_for("read"), f"/api/v1/models/sea/checks/{lost.pk}")
    assert (done["state"], done["n_samples"]) == ("done", 300), done.get("error")
    assert QualityCheck.objects.get(pk=fresh.pk).state == CheckState.QUEUED
