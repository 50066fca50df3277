from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from rest_framework.test import APIClient

from monitoring.models import MonitoringPolicy, QualityCheck
from tests.platform.monitoring.factories import monitored_model, rows, send

T0 = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)


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


def test_get_checks_lists_them_over_time(client_for: Callable[[str], APIClient], sea: object) -> None:
    ingest = client_for("ingest")
    for minutes in (5, 10):
        ingest.post(
            "/api/v1/models/sea/checks",
            {"start": T0.isoformat(), "end": (T0 + timedelta(minutes=minutes)).isoformat()},
            format="json",
        )
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


def test_check_with_start_after_end_is_a_400(client_for: Callable[[str], APIClient], sea: object) -> None:
    body = {"start": (T0 + timedelta(hours=1)).isoformat(), "end": T0.isoformat()}
    response = client_for("ingest").post("/api/v1/models/sea/checks", body, format="json")
    assert response.status_code == 400 and response.json()["errors"][0]["field"] == "start"
    assert not QualityCheck.objects.exists()


def test_naive_check_time_is_a_400(client_for: Callable[[str], APIClient], sea: object) -> None:
    response = client_for("ingest").post(
        "/api/v1/models/sea/checks", {"end": "2026-11-30T08:00:00"}, format="json"
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
        "/api/v1/models/sea/policy", {"tolerance": 0.2, "alert_k": 2}, format="json"
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
