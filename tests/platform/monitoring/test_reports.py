import time
from datetime import UTC, datetime, timedelta

from django.db import connection

from monitoring.checks import quality_check_run
from monitoring.models import MonitoringPolicy, QualityCheck
from monitoring.reports import check_report_render, check_report_request
from monitoring.window import scheduled_window
from tests.platform.monitoring.factories import monitored_model, rows, send

T0 = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)


def make_check() -> QualityCheck:
    model = monitored_model(reference_rows=300)
    send(model, rows(300, seed=2, shift=1.0), start=T0, prefix="a")
    policy = MonitoringPolicy.objects.get(model=model)
    check = quality_check_run(model_id=model.pk, window=scheduled_window(policy, T0 + timedelta(hours=1)))
    assert check is not None
    return check


def test_requested_report_is_rendered_by_a_worker_with_evidently(celery_worker: object) -> None:
    check = make_check()
    check_report_request(check=check)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        connection.close()
        check = QualityCheck.objects.get(pk=check.pk)
        if check.report:
            break
        time.sleep(0.5)
    html = check.report.open("rb").read().decode()
    assert html.lstrip().lower().startswith("<!doctype html>") and len(html) > 10_000
    for column in ("x1", "x2", "segment"):
        assert column in html


def test_rendering_twice_keeps_the_first_report(transactional_db: None) -> None:
    check = make_check()
    first = check_report_render(check_id=check.pk)
    assert check_report_render(check_id=check.pk) == first
