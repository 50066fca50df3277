"""A report is requested → rendering → ready or failed: a failure is recorded with its error,
shown on the check page and retried by staff; a stuck one is re-sent, then given up."""

import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.utils import timezone

from monitoring.checks import MAX_ATTEMPTS, quality_check_run
from monitoring.models import MonitoringPolicy, PredictionSample, QualityCheck, ReportState
from monitoring.reports import (
    ReportUnavailable,
    check_report_render,
    check_report_request,
    report_error_text,
    reports_reap_stuck,
)
from monitoring.window import scheduled_window
from registry.models import RegisteredModel
from tests.clock import T0
from tests.platform.monitoring.factories import monitored_model, rows, send

EMPTY_COLUMN = "ValueError: An empty column 'x1' was provided for drift calculation in the current dataset."


def run_check(model: RegisteredModel, end: datetime) -> QualityCheck:
    policy = MonitoringPolicy.objects.get(model=model)
    check = quality_check_run(model_id=model.pk, window=scheduled_window(policy, end))
    assert check is not None
    return QualityCheck.objects.get(pk=check.pk)


def traffic(*, x1_missing: bool) -> list[dict[str, Any]]:
    data = rows(300, seed=2)
    for row in data:
        if x1_missing:
            row["features"]["x1"] = None  # a feed that lost a feature: evidently refuses the column
    return data


def login(*, staff: bool) -> Client:
    client = Client()
    client.force_login(User.objects.create_user("staff" if staff else "viewer", is_staff=staff))
    return client


def wait_for_report(check: QualityCheck, *, seconds: float = 120) -> QualityCheck:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        connection.close()  # the worker thread writes through its own connection
        check = QualityCheck.objects.get(pk=check.pk)
        if check.report_state in (ReportState.READY, ReportState.FAILED):
            return check
        time.sleep(0.5)
    raise AssertionError(f"report of check {check.pk} still {check.report_state}")


def test_a_report_evidently_refuses_is_failed_shown_and_retried_once_the_data_is_fixed(
    celery_worker: object,
) -> None:
    model = monitored_model(reference_rows=300)
    send(model, traffic(x1_missing=True), start=T0, prefix="a")
    check = run_check(model, T0 + timedelta(hours=1))
    staff, viewer = login(staff=True), login(staff=False)
    assert staff.post(f"/checks/{check.pk}/report/request").status_code == 302
    check = wait_for_report(check)
    assert (check.report_state, check.report_error, check.report.name) == ("failed", EMPTY_COLUMN, "")
    staff_page = staff.get(f"/checks/{check.pk}/").content.decode()
    assert "The evidently report failed: ValueError: An empty column" in staff_page
    assert ">Retry report</button>" in staff_page and "report requested" not in staff_page
    viewer_page = viewer.get(f"/checks/{check.pk}/").content.decode()
    assert "The evidently report failed" in viewer_page
    assert "Retry report" not in viewer_page and "Traceback" not in viewer_page

    PredictionSample.objects.filter(model=model).delete()  # the feed is fixed and re-sent
    send(model, traffic(x1_missing=False), start=T0, prefix="a")
    assert staff.post(f"/checks/{check.pk}/report/request").status_code == 302
    check = wait_for_report(check)
    assert (check.report_state, check.report_error) == ("ready", "")
    assert "<!doctype html>" in check.report.open("rb").read().decode()[:200].lower()
    assert "Open evidently report" in staff.get(f"/checks/{check.pk}/").content.decode()


@pytest.mark.django_db
def test_a_double_click_enqueues_the_report_once(
    django_capture_on_commit_callbacks: Callable[..., Any],
) -> None:
    model = monitored_model(reference_rows=300)
    send(model, rows(300, seed=2), start=T0, prefix="a")
    check = run_check(model, T0 + timedelta(hours=1))
    staff = login(staff=True)
    with django_capture_on_commit_callbacks() as sent:
        for _ in range(2):
            assert staff.post(f"/checks/{check.pk}/report/request").status_code == 302
    assert len(sent) == 1
    check.refresh_from_db()
    assert (check.report_state, check.report_attempts) == ("requested", 1)
    page = staff.get(f"/checks/{check.pk}/").content.decode()
    assert "report requested since" in page and "Generate evidently report" not in page


@pytest.mark.django_db
def test_a_skipped_check_offers_no_report(django_capture_on_commit_callbacks: Callable[..., Any]) -> None:
    model = monitored_model(reference_rows=300, window_kind="hours", window_size=1)
    check = run_check(model, T0)
    staff = login(staff=True)
    page = staff.get(f"/checks/{check.pk}/").content.decode()
    assert "Generate evidently report" not in page and "Retry report" not in page
    with django_capture_on_commit_callbacks() as sent:
        response = staff.post(f"/checks/{check.pk}/report/request", follow=True)
    assert "No report: check #" in response.content.decode() and sent == []
    with pytest.raises(ReportUnavailable):
        check_report_request(check=check)
    assert QualityCheck.objects.get(pk=check.pk).report_state == ReportState.NONE


@pytest.mark.django_db
def test_rendering_a_skipped_check_directly_records_why_it_failed() -> None:
    model = monitored_model(reference_rows=300, window_kind="hours", window_size=1)
    check = run_check(model, T0)
    assert check_report_render(check_id=check.pk) is None
    check.refresh_from_db()
    assert check.report_state == "failed"
    assert check.report_error == "ReportUnavailable: the check is skipped: there is no window to report on"


@pytest.mark.django_db
def test_a_stuck_report_is_resent_then_given_up(
    django_capture_on_commit_callbacks: Callable[..., Any], settings: Any
) -> None:
    settings.DRIFTWATCH_CHECK_STALE_SECONDS = 60
    model = monitored_model(reference_rows=300)
    send(model, rows(300, seed=2), start=T0, prefix="a")
    check = run_check(model, T0 + timedelta(hours=1))
    long_ago = timezone.now() - timedelta(minutes=5)
    QualityCheck.objects.filter(pk=check.pk).update(
        report_state="rendering", report_requested_at=long_ago, report_started_at=long_ago, report_attempts=1
    )
    for attempts in range(2, MAX_ATTEMPTS + 1):  # its worker died: re-sent, as a fresh request
        with django_capture_on_commit_callbacks() as sent:
            assert reports_reap_stuck() == 1
        check.refresh_from_db()
        assert (check.report_state, check.report_attempts, len(sent)) == ("requested", attempts, 1)
        assert reports_reap_stuck() == 0  # just re-sent: not stale yet
        QualityCheck.objects.filter(pk=check.pk).update(report_requested_at=long_ago)  # lost again
    with django_capture_on_commit_callbacks() as sent:
        assert reports_reap_stuck() == 0
    check.refresh_from_db()
    assert (check.report_state, sent) == ("failed", [])
    assert check.report_error == f"gave up after {MAX_ATTEMPTS} attempts: no worker finished rendering it"
    page = login(staff=True).get(f"/checks/{check.pk}/").content.decode()
    assert "The evidently report failed: gave up after" in page and ">Retry report</button>" in page


def test_the_error_shown_is_one_line_without_traceback_or_paths() -> None:
    exc = OSError(
        "cannot read /var/lib/driftwatch/media/reference/ref-7.parquet\nTraceback (most recent call)"
    )
    assert report_error_text(exc) == "OSError: cannot read …/ref-7.parquet"
    assert len(report_error_text(ValueError("x" * 5000))) == 300
    assert report_error_text(KeyError()) == "KeyError"


@pytest.mark.django_db
def test_the_admin_action_queues_reports_only_for_checks_with_a_window_and_once(
    django_capture_on_commit_callbacks: Callable[..., Any],
) -> None:
    model = monitored_model(reference_rows=300, window_kind="hours", window_size=1)
    skipped = run_check(model, T0)
    send(model, rows(300, seed=2), start=T0, prefix="a", step=timedelta(seconds=5))
    done = run_check(model, T0 + timedelta(hours=1))
    admin = Client()
    admin.force_login(User.objects.create_superuser("root"))
    form = {"action": "request_report", "_selected_action": [skipped.pk, done.pk]}
    with django_capture_on_commit_callbacks() as sent:
        for _ in range(2):
            admin.post("/admin/monitoring/qualitycheck/", form, follow=True)
    assert len(sent) == 1
    states = dict(QualityCheck.objects.values_list("pk", "report_state"))
    assert states == {skipped.pk: "", done.pk: "requested"}
