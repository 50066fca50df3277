"""Every active user logs in to the dashboard and reads it; only staff change anything."""

from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.test import Client

from monitoring.checks import quality_check_run
from monitoring.models import Alert, AlertState, MonitoringPolicy, QualityCheck
from monitoring.window import scheduled_window
from tests.clock import T0
from tests.platform.monitoring.factories import monitored_model, rows, send


@pytest.fixture
def alert(db: None) -> Alert:
    """An open accuracy alert, from a good window followed by a bad one."""
    model = monitored_model("sea", reference_rows=600, window_size=300, min_samples=100, min_labels=100)
    policy = MonitoringPolicy.objects.get(model=model)
    send(model, rows(300, seed=2), start=T0, prefix="g")
    quality_check_run(model_id=model.pk, window=scheduled_window(policy, T0 + timedelta(hours=1)))
    send(model, rows(300, seed=3, shift=1.5, flip=0.4), start=T0 + timedelta(hours=1), prefix="b")
    quality_check_run(model_id=model.pk, window=scheduled_window(policy, T0 + timedelta(hours=2)))
    return Alert.objects.filter(state=AlertState.OPEN).first()  # type: ignore[return-value]


def viewer() -> Client:
    client = Client()
    client.force_login(User.objects.create_user("viewer", password="pw-viewer-12345"))
    return client


def test_active_non_staff_user_logs_in_to_the_dashboard(db: None) -> None:
    User.objects.create_user("reader", password="pw-reader-12345")
    client = Client()
    response = client.post(
        "/login/", {"username": "reader", "password": "pw-reader-12345", "next": "/alerts/"}
    )
    assert response.status_code == 302 and response["Location"] == "/alerts/"
    assert client.get("/alerts/").status_code == 200


def test_inactive_user_cannot_log_in(db: None) -> None:
    User.objects.create_user("gone", password="pw-gone-12345", is_active=False)
    client = Client()
    response = client.post("/login/", {"username": "gone", "password": "pw-gone-12345"})
    assert response.status_code == 200  # the form again, with its error
    assert client.get("/").status_code == 302


def test_logout_ends_the_session(db: None) -> None:
    client = viewer()
    assert client.post("/logout/").status_code == 302
    assert client.get("/").status_code == 302


def test_non_staff_cannot_acknowledge_or_resolve_alerts(alert: Alert) -> None:
    client = viewer()
    assert client.post(f"/alerts/{alert.pk}/acknowledge").status_code == 403
    assert client.post(f"/alerts/{alert.pk}/resolve").status_code == 403
    alert.refresh_from_db()
    assert alert.state == AlertState.OPEN


def test_non_staff_cannot_request_a_report(alert: Alert) -> None:
    check = QualityCheck.objects.latest("pk")
    assert viewer().post(f"/checks/{check.pk}/report/request").status_code == 403
    check.refresh_from_db()
    assert check.report_requested_at is None


def test_non_staff_pages_show_no_action_buttons(alert: Alert) -> None:
    client = viewer()
    check = QualityCheck.objects.latest("pk")
    pages = [client.get(p).content.decode() for p in ("/alerts/", "/models/sea/", f"/checks/{check.pk}/")]
    for page in pages:
        assert "/acknowledge" not in page and "/resolve" not in page
        assert "/report/request" not in page and "/checks/run" not in page
        assert 'href="/admin/"' not in page


def test_staff_pages_show_the_action_buttons(alert: Alert) -> None:
    client = Client()
    client.force_login(User.objects.create_user("ops", password="pw-ops-12345", is_staff=True))
    page = client.get("/alerts/").content.decode()
    assert f"/alerts/{alert.pk}/acknowledge" in page and f"/alerts/{alert.pk}/resolve" in page


@pytest.mark.parametrize("login_url", ["/login/", "/admin/login/"])
def test_repeated_wrong_passwords_lock_the_login_even_for_the_right_one(db: None, login_url: str) -> None:
    User.objects.create_user("target", password="pw-right-12345", is_staff=True)
    client = Client()
    for _ in range(5):
        wrong = client.post(login_url, {"username": "target", "password": "wrong"})
        assert wrong.status_code in (200, 429)
    locked = client.post(login_url, {"username": "target", "password": "pw-right-12345"})
    assert locked.status_code == 429
    assert client.get("/").status_code == 302  # still not logged in


def test_a_lockout_is_per_username(db: None) -> None:
    User.objects.create_user("other", password="pw-other-12345")
    client = Client()
    for _ in range(5):
        client.post("/login/", {"username": "target", "password": "wrong"})
    assert client.post("/login/", {"username": "other", "password": "pw-other-12345"}).status_code == 302
