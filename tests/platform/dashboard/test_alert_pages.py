"""Alerts as a person meets them on the pages: wording, current state, confirmations, who acted."""

from datetime import timedelta
from typing import Any

from django.test import Client

from monitoring.models import Alert
from tests.platform.dashboard.conftest import T0, run_check
from tests.platform.monitoring.factories import rows, send


def test_prediction_drift_alert_names_the_test_and_rounds_like_the_check_page(
    staff: Client, story: dict[str, Any]
) -> None:
    alert = Alert.objects.get(model=story["model"], kind="prediction_drift")
    drift = story["bad"].prediction_drift
    assert alert.message == (
        f"prediction drift: {drift['method_display']} {drift['score']:.4f} (threshold {drift['threshold']:.4f})"
    )
    page = staff.get(f"/checks/{story['bad'].pk}/").content.decode()
    assert drift["method_display"] in page and f"{drift['score']:.4f}" in page


def test_a_live_alert_message_follows_the_latest_breaching_check(
    staff: Client, story: dict[str, Any]
) -> None:
    model = story["model"]
    send(model, rows(400, seed=4, shift=1.5, flip=0.45), start=T0 + timedelta(hours=2), prefix="worse")
    latest = run_check(model, T0 + timedelta(hours=3))
    alert = Alert.objects.get(model=model, kind="accuracy_drop", state="open")
    assert f"accuracy {latest.decisions['value']:.4f} vs baseline" in alert.message
    assert alert.details["last_seen_check"] == latest.pk
    page = staff.get("/alerts/").content.decode()
    assert f"still breaching as of {latest.window_end:%Y-%m-%d %H:%M}" in page


def test_resolve_button_says_it_silences_the_kind_for_the_cooldown(
    staff: Client, story: dict[str, Any]
) -> None:
    page = staff.get("/alerts/").content.decode()
    assert "silences new accuracy_drop alerts for the 0-minute cooldown" in page
    response = staff.post(f"/alerts/{story['alert'].pk}/resolve", follow=True)
    assert "can open again after the 0-minute cooldown" in response.content.decode()


def test_acknowledge_confirms_and_records_who(staff: Client, story: dict[str, Any]) -> None:
    alert = story["alert"]
    response = staff.post(f"/alerts/{alert.pk}/acknowledge", {"next": "/alerts/"}, follow=True)
    page = response.content.decode()
    assert f"Alert #{alert.pk} (accuracy_drop) acknowledged by ops." in page
    alert.refresh_from_db()
    assert alert.details["acknowledged_by"] == "ops"
    assert "by ops" in page
