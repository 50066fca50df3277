"""Every state change made by a person or a token is in the audit log, with who, what and when."""

from datetime import timedelta
from io import StringIO

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client

from core.audit import audit_record
from core.models import AuditEvent
from monitoring.checks import quality_check_run
from monitoring.models import Alert, AlertState, MonitoringPolicy
from monitoring.window import scheduled_window
from registry.models import RegisteredModel
from tests.clock import T0
from tests.platform.monitoring.factories import monitored_model, rows, send


@pytest.fixture
def staff(db: None) -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("ops", password="pw-ops-12345"))
    return client


@pytest.fixture
def alert(db: None) -> Alert:
    model = monitored_model("sea", reference_rows=600, window_size=300, min_samples=100, min_labels=100)
    policy = MonitoringPolicy.objects.get(model=model)
    send(model, rows(300, seed=2), start=T0, prefix="g")
    quality_check_run(model_id=model.pk, window=scheduled_window(policy, T0 + timedelta(hours=1)))
    send(model, rows(300, seed=3, shift=1.5, flip=0.4), start=T0 + timedelta(hours=1), prefix="b")
    quality_check_run(model_id=model.pk, window=scheduled_window(policy, T0 + timedelta(hours=2)))
    return Alert.objects.filter(state=AlertState.OPEN).first()  # type: ignore[return-value]


def test_audit_record_names_actor_action_target_and_details(db: None) -> None:
    user = User.objects.create_user("bob")
    model = RegisteredModel.objects.create(name="m", task="regression", features=[])
    event = audit_record(actor=user, action="model.retrain", target=model, details={"job": 7})
    assert (event.actor, event.actor_label, event.action) == (user, "bob", "model.retrain")
    assert (event.target_type, event.target_id, event.target_label) == (
        "registry.registeredmodel",
        str(model.pk),
        "m",
    )
    assert event.details == {"job": 7} and event.at is not None


def test_acknowledge_and_resolve_from_the_dashboard_are_audited(staff: Client, alert: Alert) -> None:
    staff.post(f"/alerts/{alert.pk}/acknowledge")
    staff.post(f"/alerts/{alert.pk}/resolve")
    events = AuditEvent.objects.filter(target_type="monitoring.alert", target_id=str(alert.pk))
    assert sorted(events.values_list("action", "actor_label")) == [
        ("alert.acknowledge", "ops"),
        ("alert.resolve", "ops"),
    ]


def test_a_refused_acknowledge_is_not_audited(alert: Alert) -> None:
    client = Client()
    client.force_login(User.objects.create_user("viewer", password="pw-viewer-12345"))
    client.post(f"/alerts/{alert.pk}/acknowledge")
    assert not AuditEvent.objects.filter(action="alert.acknowledge").exists()


def test_policy_patch_through_the_api_is_audited_with_the_token(client_for: object, alert: Alert) -> None:
    client = client_for("admin")  # type: ignore[operator]
    response = client.patch("/api/v1/models/sea/policy", {"min_samples": 150}, format="json")
    assert response.status_code == 200, response.json()
    event = AuditEvent.objects.get(action="policy.update")
    assert event.actor is not None and event.actor.username == "api-admin"
    assert "token dw_" in event.actor_label
    assert event.details == {"changes": {"min_samples": 150}}


def test_refused_policy_patch_is_not_audited(client_for: object, alert: Alert) -> None:
    client = client_for("admin")  # type: ignore[operator]
    assert client.patch("/api/v1/models/sea/policy", {"min_samples": -1}, format="json").status_code == 400
    assert not AuditEvent.objects.filter(action="policy.update").exists()


def test_token_creation_is_audited(db: None) -> None:
    call_command("create_api_token", "alice", "--scope", "ingest", "--create-user", stdout=StringIO())
    event = AuditEvent.objects.get(action="token.create")
    assert event.actor_label == "manage.py create_api_token"
    assert event.details["user"] == "alice" and event.details["scope"] == "ingest"


def test_audit_log_is_visible_and_read_only_in_the_admin(staff: Client, db: None) -> None:
    event = audit_record(actor="beat", action="alert.resolve", target="alert #1")
    assert "alert.resolve" in staff.get("/admin/core/auditevent/").content.decode()
    assert staff.get(f"/admin/core/auditevent/{event.pk}/change/").status_code == 200
    assert staff.post(f"/admin/core/auditevent/{event.pk}/delete/", {"post": "yes"}).status_code == 403
    assert AuditEvent.objects.filter(pk=event.pk).exists()


def test_registry_writes_through_the_api_are_audited_with_the_token(client_for: object) -> None:
    client = client_for("ingest")  # type: ignore[operator]
    features = [{"name": "x", "type": "numerical"}]
    client.post("/api/v1/models", {"name": "reg", "task": "regression", "features": features}, format="json")
    rows = [{"features": {"x": float(i)}, "label": float(i)} for i in range(20)]
    client.post("/api/v1/models/reg/reference", {"rows": rows}, format="json")
    client.post("/api/v1/models/reg/versions", {}, format="json")
    events = AuditEvent.objects.filter(target_type="registry.registeredmodel").order_by("id")
    assert list(events.values_list("action", flat=True)) == [
        "model.register",
        "reference.upload",
        "version.create",
    ]
    assert all("token dw_" in e.actor_label for e in events)
    assert events[1].details["rows"] == 20


def test_refused_registration_is_not_audited(client_for: object) -> None:
    client = client_for("ingest")  # type: ignore[operator]
    assert client.post("/api/v1/models", {"name": "bad name!"}, format="json").status_code == 400
    assert not AuditEvent.objects.filter(action="model.register").exists()


def test_check_run_and_report_request_from_the_dashboard_are_audited(staff: Client, alert: Alert) -> None:
    staff.post("/models/sea/checks/run")
    run = AuditEvent.objects.get(action="check.run")
    assert run.actor_label == "ops" and run.target_type == "monitoring.qualitycheck"
    staff.post(f"/checks/{run.target_id}/report/request")
    assert AuditEvent.objects.get(action="report.request").target_id == run.target_id
