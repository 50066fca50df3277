"""Skipped checks on the dashboard: drawn nowhere, never the home page's latest, listed with their reason."""

from datetime import timedelta

import pytest
from django.test import Client

from dashboard.presenters import model_rows
from dashboard.quality_chart import quality_chart
from monitoring.models import CheckState, MonitoringPolicy, QualityCheck
from registry.models import RegisteredModel
from tests.platform.dashboard.conftest import T0, run_check
from tests.platform.monitoring.factories import monitored_model, rows, send


def hourly_model() -> RegisteredModel:
    return monitored_model(
        reference_rows=600, window_kind="hours", window_size=1, min_samples=100, min_labels=100
    )


@pytest.mark.django_db
def test_skipped_checks_are_drawn_nowhere_and_the_home_page_shows_the_latest_real_check() -> None:
    model = hourly_model()
    assert run_check(model, T0).state == CheckState.SKIPPED
    policy = MonitoringPolicy.objects.get(model=model)
    assert quality_chart(model=model, policy=policy) is None
    assert (model_rows(name=model.name)[0]["status"], model_rows(name=model.name)[0]["latest"]) == (
        "no data",
        None,
    )
    send(model, rows(300, seed=2), start=T0, prefix="a", step=timedelta(seconds=5))
    real = run_check(model, T0 + timedelta(hours=1))
    run_check(model, T0 + timedelta(hours=2))  # skipped again: no traffic in that hour
    chart = quality_chart(model=model, policy=policy)
    assert chart is not None and len(chart["series"][0]["points"]) == 1
    assert model_rows(name=model.name)[0]["latest"]["id"] == real.pk


def test_the_checks_table_and_the_check_page_show_the_reason(staff: Client) -> None:
    model = hourly_model()
    check = run_check(model, T0)
    listed = staff.get(f"/models/{model.name}/").content.decode()
    assert '<span class="state skipped">skipped</span>' in listed and check.skipped_reason in listed
    page = staff.get(f"/checks/{check.pk}/").content.decode()
    assert f"Skipped: {check.skipped_reason}" in page


def test_run_check_now_over_an_empty_window_says_why_it_was_skipped(staff: Client) -> None:
    hourly_model()
    response = staff.post("/models/sea/checks/run", follow=True).content.decode()
    check = QualityCheck.objects.get()
    assert check.state == CheckState.SKIPPED and check.skipped_reason.startswith("no predictions between")
    assert f"skipped ({check.skipped_reason})." in response
