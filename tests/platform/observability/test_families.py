"""Each metric family carries the right value after the action that drives it."""

import re
from collections.abc import Callable
from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone
from rest_framework.test import APIClient

from core.models import OutboxMessage
from registry.models import RegisteredModel
from retraining.inventory import DeviceReport, devices_report
from retraining.models import GpuPlacement, JobState, RetrainJob
from tests.platform.conftest import make_model
from tests.platform.monitoring.factories import monitored_model, rows, send
from tests.platform.observability.scrape import value
from workers import queues
from workers.celery_app import app

Scrape = Callable[[], str]
ACCEPTED = "driftwatch_ingest_accepted_rows_total"
REJECTED = "driftwatch_ingest_rejected_rows_total"


def hour_start() -> timezone.datetime:
    return timezone.now().replace(minute=0, second=0, microsecond=0)


def sample(i: int) -> dict[str, object]:
    return {
        "id": f"s{i}",
        "features": {"age": 30, "income": 1000.0, "city": "paris"},
        "prediction": "no",
    }


def test_accepted_and_duplicate_predictions_are_counted(
    scrape: Scrape, ingest: APIClient, churn: RegisteredModel
) -> None:
    before = scrape()
    body = {"samples": [sample(1), sample(2), sample(2)]}
    assert ingest.post("/api/v1/models/churn/predictions", body, format="json").status_code == 200
    after = scrape()
    labels = {"model": "churn", "kind": "predictions"}
    assert value(after, ACCEPTED, **labels) - value(before, ACCEPTED, **labels) == 2
    duplicates = "driftwatch_ingest_duplicate_rows_total"
    assert value(after, duplicates, **labels) - value(before, duplicates, **labels) == 1


def test_rejected_rows_are_counted_by_the_field_of_their_first_error(
    scrape: Scrape, ingest: APIClient, churn: RegisteredModel
) -> None:
    before = scrape()
    bad_time = {**sample(1), "timestamp": "yesterday"}
    bad_feature = {**sample(2), "features": {"age": "old", "income": 1.0, "city": "paris"}}
    unknown = {**sample(3), "colour": "red"}
    body = {"samples": [bad_time, bad_feature, {**bad_feature, "id": "s4"}, unknown, sample(5)]}
    assert ingest.post("/api/v1/models/churn/predictions", body, format="json").status_code == 400
    after = scrape()

    def delta(reason: str) -> float:
        labels = {"model": "churn", "kind": "predictions", "reason": reason}
        return value(after, REJECTED, **labels) - value(before, REJECTED, **labels)

    assert (delta("timestamp"), delta("features"), delta("unknown_field")) == (1, 2, 1)
    requests = "driftwatch_ingest_rejected_requests_total"
    labels = {"model": "churn", "kind": "predictions"}
    assert value(after, requests, **labels) - value(before, requests, **labels) == 1
    assert value(after, ACCEPTED, **labels) == value(before, ACCEPTED, **labels)


def test_stored_labels_are_counted(scrape: Scrape, ingest: APIClient, churn: RegisteredModel) -> None:
    before = scrape()
    body = {"labels": [{"id": "s1", "label": "no"}, {"id": "s9", "label": "yes"}]}
    assert ingest.post("/api/v1/models/churn/labels", body, format="json").status_code == 200
    labels = {"model": "churn", "kind": "labels"}
    assert value(scrape(), ACCEPTED, **labels) - value(before, ACCEPTED, **labels) == 2


def test_request_latency_is_observed_by_url_route(
    scrape: Scrape, ingest: APIClient, churn: RegisteredModel
) -> None:
    count = "driftwatch_http_request_duration_seconds_count"
    labels = {"endpoint": "/api/v1/models/<str:name>/predictions", "method": "POST"}
    before = scrape()
    ingest.post("/api/v1/models/churn/predictions", {"samples": [sample(1)]}, format="json")
    ingest.post("/api/v1/models/churn/predictions", {"samples": []}, format="json")
    after = scrape()
    assert value(after, count, **labels) - value(before, count, **labels) == 2
    responses = "driftwatch_http_responses_total"
    assert (
        value(after, responses, **labels, status="400") - value(before, responses, **labels, status="400")
        == 1
    )


def test_an_unrouted_path_is_one_endpoint_whatever_the_path(scrape: Scrape, ingest: APIClient) -> None:
    ingest.get("/no/such/page-1")
    ingest.get("/no/such/page-2")
    text = scrape()
    assert "page-1" not in text
    assert (
        value(text, "driftwatch_http_request_duration_seconds_count", endpoint="unmatched", method="GET") >= 2
    )


@pytest.fixture
def checked(client_for: Callable[[str], APIClient]) -> RegisteredModel:
    """A model whose traffic is wrong almost half the time, checked once through the API."""
    start = hour_start() - timedelta(hours=3)
    model = monitored_model()
    send(model, rows(600, seed=2, flip=0.45), start=start, prefix="a")
    body = {"end": (start + timedelta(hours=1)).isoformat()}
    response = client_for("ingest").post("/api/v1/models/sea/checks", body, format="json")
    assert response.status_code == 201, response.json()
    return model


def test_a_finished_check_gives_lag_duration_quality_and_drift(
    scrape: Scrape, checked: RegisteredModel
) -> None:
    check = checked.checks.get()
    with time_machine.travel(check.finished_at + timedelta(seconds=120), tick=False):
        text = scrape()
    assert value(text, "driftwatch_check_lag_seconds", model="sea") == pytest.approx(120)
    duration = (check.finished_at - check.started_at).total_seconds()
    assert value(text, "driftwatch_check_duration_seconds", model="sea") == pytest.approx(duration)
    assert value(text, "driftwatch_quality_realised", model="sea", metric="accuracy") == pytest.approx(
        check.metrics["accuracy"]
    )
    assert value(text, "driftwatch_quality_estimated", model="sea", metric="accuracy") == pytest.approx(
        check.estimated["value"]
    )
    assert value(text, "driftwatch_drift_share", model="sea") == pytest.approx(check.drift["share"])


def test_an_open_alert_is_counted_by_model_and_kind(scrape: Scrape, checked: RegisteredModel) -> None:
    alert = checked.alerts.get(kind="accuracy_drop")
    name = "driftwatch_alerts_open"
    assert value(scrape(), name, model="sea", kind="accuracy_drop", state="open") == 1
    alert.state = "resolved"
    alert.save()
    assert value(scrape(), name, model="sea", kind="accuracy_drop", state="open") == 0


def test_retrain_jobs_are_counted_by_state(scrape: Scrape, churn: RegisteredModel) -> None:
    RetrainJob.objects.create(model=churn, state=JobState.RUNNING, trigger="api")
    for _ in range(2):
        RetrainJob.objects.create(model=churn, state=JobState.FAILED, trigger="api")
    text = scrape()
    assert value(text, "driftwatch_retrain_jobs", state="running") == 1
    assert value(text, "driftwatch_retrain_jobs", state="failed") == 2
    assert value(text, "driftwatch_retrain_jobs", state="queued") == 0


def test_gpu_reserved_memory_is_the_active_jobs_reservations(scrape: Scrape, churn: RegisteredModel) -> None:
    gib = 2**30
    (device,) = devices_report(host="node1", devices=[DeviceReport(0, "sim", 24 * gib, 20 * gib, True)])
    running = RetrainJob.objects.create(model=churn, state=JobState.RUNNING, trigger="api")
    done = RetrainJob.objects.create(model=make_model("other"), state=JobState.SUCCEEDED, trigger="api")
    GpuPlacement.objects.create(job=running, device=device, reserved_bytes=6 * gib)
    GpuPlacement.objects.create(job=done, device=device, reserved_bytes=9 * gib)
    text = scrape()
    labels = {"device": "node1:0", "host": "node1", "index": "0", "name": "sim"}
    assert value(text, "driftwatch_gpu_reserved_bytes", **labels) == 6 * gib
    assert value(text, "driftwatch_gpu_capacity_bytes", **labels) == 24 * gib
    assert value(text, "driftwatch_gpu_live", **labels) == 1


def test_estimator_error_is_a_histogram_of_estimated_over_measured_peaks_of_finished_jobs(
    scrape: Scrape, churn: RegisteredModel
) -> None:
    now = timezone.now()
    for estimated in (90, 110, 300):  # -10 %, +10 %, +200 % against a measured peak of 100
        RetrainJob.objects.create(
            model=churn, state=JobState.SUCCEEDED, trigger="api", finished_at=now,
            estimated_peak_bytes=estimated, measured_peak_bytes=100,
        )  # fmt: skip
    RetrainJob.objects.create(model=churn, state=JobState.RUNNING, trigger="api", estimated_peak_bytes=50)
    text = scrape()
    name = "driftwatch_estimator_peak_ratio"
    assert value(text, f"{name}_bucket", le="0.9") == 1
    assert value(text, f"{name}_bucket", le="1.0") == 1
    assert value(text, f"{name}_bucket", le="1.1") == 2
    assert value(text, f"{name}_bucket", le="2.0") == 2
    assert value(text, f"{name}_bucket", le="+Inf") == 3
    assert value(text, f"{name}_count") == 3
    assert value(text, f"{name}_sum") == pytest.approx(0.9 + 1.1 + 3.0)


def test_outbox_size_and_age(scrape: Scrape, db: None) -> None:
    assert value(scrape(), "driftwatch_outbox_messages") == 0
    OutboxMessage.objects.create(name="driftwatch.checks.check_model", args=[1])
    with time_machine.travel(timezone.now() + timedelta(seconds=90), tick=False):
        text = scrape()
    assert value(text, "driftwatch_outbox_messages") == 1
    assert value(text, "driftwatch_outbox_oldest_age_seconds") == pytest.approx(90, abs=2)


def test_queue_depth_counts_messages_waiting_in_the_broker(scrape: Scrape, db: None) -> None:
    with app.connection_for_write() as conn:
        conn.default_channel.queue_purge(queues.TRAINING)
    before = value(scrape(), "driftwatch_celery_queue_depth", queue=queues.TRAINING)
    try:
        for _ in range(3):
            app.send_task(queues.RETRAIN_RUN, args=[0], queue=queues.TRAINING)
        after = value(scrape(), "driftwatch_celery_queue_depth", queue=queues.TRAINING)
    finally:
        with app.connection_for_write() as conn:
            conn.default_channel.queue_purge(queues.TRAINING)
    assert after - before == 3
    assert value(scrape(), "driftwatch_metrics_source_up", source="broker") == 1


# Prometheus' naming practice: one prefix, snake case (colons are for recording rules), base
# units spelled out as the last word (seconds, bytes), `_total` on counters only.
NAME = re.compile(r"^driftwatch_[a-z][a-z0-9]*(_[a-z0-9]+)*$")
NOT_BASE_UNITS = {"ms", "milliseconds", "microseconds", "minutes", "hours", "days", "kb", "kib", "mb",
                  "mib", "gb", "gib", "percent"}  # fmt: skip
TIME_WORDS = {"duration", "lag", "age", "latency", "time"}


def test_every_family_follows_the_prometheus_naming_conventions(
    scrape: Scrape, ingest: APIClient, checked: RegisteredModel
) -> None:
    bad = {"samples": [{"id": 1}]}  # a rejected row: the rejection counters get a series
    assert ingest.post("/api/v1/models/sea/predictions", bad, format="json").status_code == 400
    text = scrape()
    declared = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.MULTILINE))
    # Besides ours only the library's own process_/python_ collectors (absent in multiprocess mode).
    assert sorted(n for n in declared if not n.startswith(("driftwatch_", "process_", "python_"))) == []
    types = {name: kind for name, kind in declared.items() if name.startswith("driftwatch_")}
    assert len(types) >= 20, sorted(types)
    assert sorted(name for name in types if not NAME.match(name)) == []
    words = {name: set(name.split("_")) for name in types}
    assert sorted(name for name, w in words.items() if w & NOT_BASE_UNITS) == []
    timed = [name for name, w in words.items() if w & TIME_WORDS]
    assert timed and sorted(name for name in timed if not name.endswith("_seconds")) == []
    counters = [name for name, kind in types.items() if kind == "counter"]
    assert len(counters) >= 4
    assert sorted(name for name in counters if not name.endswith("_total")) == []
    assert sorted(name for name, kind in types.items() if kind != "counter" and name.endswith("_total")) == []
