from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest
from rest_framework.test import APIClient

from monitoring.models import Alert, MonitoringPolicy, QualityCheck
from monitoring.services import labels_ingest
from tests.clock import FUTURE, T0, iso
from tests.platform.monitoring.factories import monitored_model, rows, send


@pytest.fixture
def sea(db: None):  # type: ignore[no-untyped-def]
    model = monitored_model()
    send(model, rows(600, seed=2, flip=0.45), start=T0, prefix="a")
    return model


def test_post_check_runs_it_now_over_a_range(client_for: Callable[[str], APIClient], sea: object) -> None:
    body = {"start": T0.isoformat(), "end": (T0 + timedelta(minutes=5)).isoformat()}
    response = client_for("ingest").post("/api/v1/models/sea/checks", body, format="json")
    assert response.status_code == 201, response.json()
    check = response.json()
    assert (check["n_samples"], check["state"]) == (300, "done")
    assert check["decisions"]["accuracy_drop"] is True


def _check_ranges(ingest: APIClient, minutes: tuple[int, ...]) -> None:
    """Checks over T0 .. T0 + each of ``minutes``."""
    for m in minutes:
        ingest.post(
            "/api/v1/models/sea/checks",
            {"start": T0.isoformat(), "end": (T0 + timedelta(minutes=m)).isoformat()},
            format="json",
        )


def test_get_checks_lists_them_over_time(client_for: Callable[[str], APIClient], sea: object) -> None:
    _check_ranges(client_for("ingest"), minutes=(5, 10))
    listed = client_for("read").get(
        f"/api/v1/models/sea/checks?start={(T0 + timedelta(minutes=6)).isoformat().replace('+', '%2B')}"
    )
    assert listed.status_code == 200
    assert [c["n_samples"] for c in listed.json()] == [600]


def test_alerts_endpoint_lists_the_opened_alert(client_for: Callable[[str], APIClient], sea: object) -> None:
    client_for("ingest").post(
        "/api/v1/models/sea/checks", {"end": (T0 + timedelta(hours=1)).isoformat()}, format="json"
    )
    alerts = client_for("read").get("/api/v1/models/sea/alerts?state=open").json()
    assert "accuracy_drop" in [a["kind"] for a in alerts]


def test_get_checks_keeps_those_ending_by_end(client_for: Callable[[str], APIClient], sea: object) -> None:
    _check_ranges(client_for("ingest"), minutes=(5, 10))
    end = (T0 + timedelta(minutes=6)).isoformat().replace("+", "%2B")
    listed = client_for("read").get(f"/api/v1/models/sea/checks?end={end}")
    assert [c["n_samples"] for c in listed.json()] == [300]


def test_alerts_state_filter_leaves_other_states_out(
    client_for: Callable[[str], APIClient], sea: object
) -> None:
    client_for("ingest").post(
        "/api/v1/models/sea/checks", {"end": (T0 + timedelta(hours=1)).isoformat()}, format="json"
    )
    reader = client_for("read")
    every = reader.get("/api/v1/models/sea/alerts").json()
    assert "accuracy_drop" in [a["kind"] for a in every]
    assert reader.get("/api/v1/models/sea/alerts?state=resolved").json() == []
    opened = [a["opened_at"] for a in every]
    assert opened == sorted(opened, reverse=True)


def test_check_with_start_after_end_is_a_400(client_for: Callable[[str], APIClient], sea: object) -> None:
    body = {"start": (T0 + timedelta(hours=1)).isoformat(), "end": T0.isoformat()}
    response = client_for("ingest").post("/api/v1/models/sea/checks", body, format="json")
    assert response.status_code == 400 and response.json()["errors"][0]["field"] == "start"
    assert not QualityCheck.objects.exists()


def test_naive_check_time_is_a_400(client_for: Callable[[str], APIClient], sea: object) -> None:
    response = client_for("ingest").post(
        "/api/v1/models/sea/checks", {"end": iso(T0, tz=False)}, format="json"
    )
    assert response.status_code == 400 and response.json()["errors"][0]["field"] == "end"


def test_policy_is_readable_and_admin_can_change_it(
    client_for: Callable[[str], APIClient], sea: object
) -> None:
    assert client_for("read").get("/api/v1/models/sea/policy").json()["window_size"] == 1000
    assert (
        client_for("ingest").patch("/api/v1/models/sea/policy", {"tolerance": 0.2}, format="json").status_code
        == 403
    )
    response = client_for("admin").patch(
        "/api/v1/models/sea/policy", {"tolerance": 0.2, "alert_k": 2, "alert_n": 3}, format="json"
    )
    assert response.status_code == 200
    policy = MonitoringPolicy.objects.get(model__name="sea")
    assert (policy.tolerance, policy.alert_k) == (0.2, 2)


@pytest.mark.parametrize(
    ("body", "field"), [({"window_kind": "weeks"}, "window_kind"), ({"colour": 1}, "colour")]
)
def test_bad_policy_change_is_a_400_naming_the_field(
    client_for: Callable[[str], APIClient], sea: object, body: dict[str, object], field: str
) -> None:
    response = client_for("admin").patch("/api/v1/models/sea/policy", body, format="json")
    assert response.status_code == 400
    assert response.json()["errors"][0]["field"] == field
    assert MonitoringPolicy.objects.get(model__name="sea").window_kind == "samples"


def post_range(client: APIClient, start: datetime, end: datetime) -> Any:
    return client.post(
        "/api/v1/models/sea/checks", {"start": start.isoformat(), "end": end.isoformat()}, format="json"
    )


def test_k_of_n_counts_range_checks_as_one_series(client_for: Callable[[str], APIClient], db: None) -> None:
    model = monitored_model(alert_k=2, alert_n=3, min_samples=100, min_labels=100)
    send(model, rows(500, seed=2, flip=0.45), start=T0, prefix="a", step=timedelta(minutes=1))
    ingest = client_for("ingest")
    opened_at = []
    for i in range(5):
        body = post_range(
            ingest, T0 + timedelta(minutes=100 * i), T0 + timedelta(minutes=100 * (i + 1))
        ).json()
        assert body["decisions"]["accuracy_drop"] is True
        opened_at += [i for a in body["alerts_opened"] if a["kind"] == "accuracy_drop"]
    assert opened_at == [1], "the second breaching range check is the 2nd of the last 3"


def test_rechecking_a_window_returns_200_with_metrics_refreshed_by_late_labels(
    client_for: Callable[[str], APIClient], db: None
) -> None:
    model = monitored_model()
    data = rows(200, seed=3)
    send(model, data[:100], start=T0, prefix="a")
    send(model, data[100:], start=T0 + timedelta(seconds=100), prefix="b", labelled=False)
    ingest = client_for("ingest")
    end = {"end": (T0 + timedelta(hours=1)).isoformat()}
    first = ingest.post("/api/v1/models/sea/checks", end, format="json")
    assert first.status_code == 201 and first.json()["n_labelled"] == 100
    labels_ingest(
        model=model, body={"labels": [{"id": f"b{i}", "label": r["label"]} for i, r in enumerate(data[100:])]}
    )
    again = ingest.post("/api/v1/models/sea/checks", end, format="json")
    assert again.status_code == 200
    body = again.json()
    assert (body["id"], body["n_labelled"], body["metrics"]["n"]) == (first.json()["id"], 200, 200)
    assert body["computed_at"] == first.json()["computed_at"] and body["labels_refreshed_at"] is not None


def test_check_response_names_the_alerts_it_opened_and_resolved(
    client_for: Callable[[str], APIClient], db: None
) -> None:
    model = monitored_model(resolve_after=1, window_size=500)
    send(model, rows(500, seed=4, flip=0.45), start=T0, prefix="bad")
    ingest = client_for("ingest")
    bad = ingest.post(
        "/api/v1/models/sea/checks", {"end": (T0 + timedelta(hours=1)).isoformat()}, format="json"
    )
    opened = [a for a in bad.json()["alerts_opened"] if a["kind"] == "accuracy_drop"]
    assert len(opened) == 1 and bad.json()["alerts_resolved"] == []
    send(model, rows(500, seed=5), start=T0 + timedelta(hours=1), prefix="good")
    good = ingest.post(
        "/api/v1/models/sea/checks", {"end": (T0 + timedelta(hours=2)).isoformat()}, format="json"
    )
    resolved = [a for a in good.json()["alerts_resolved"] if a["kind"] == "accuracy_drop"]
    assert [a["id"] for a in resolved] == [opened[0]["id"]]
    alert = Alert.objects.get(pk=opened[0]["id"])
    assert (alert.opened_by_id, alert.resolved_by_check_id) == (bad.json()["id"], good.json()["id"])
    assert resolved[0]["resolved_by_check"] == good.json()["id"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"end": T0.isoformat(), "window": "1h"}, "window"),
        ({"end": iso(FUTURE)}, "end"),
        (["not", "an", "object"], "body"),
    ],
)
def test_bad_check_request_is_a_400_naming_the_field(
    client_for: Callable[[str], APIClient], sea: object, body: Any, field: str
) -> None:
    response = client_for("ingest").post("/api/v1/models/sea/checks", body, format="json")
    assert response.status_code == 400 and response.json()["errors"][0]["field"] == field
    assert not QualityCheck.objects.exists()


def test_unknown_alert_state_filter_is_a_400(client_for: Callable[[str], APIClient], sea: object) -> None:
    response = client_for("read").get("/api/v1/models/sea/alerts?state=bogus")
    assert response.status_code == 400 and response.json()["errors"][0]["field"] == "state"
