"""Every dashboard page in headless Chromium, at desktop and phone widths, over a real story:
a good window then a drifted one, which opens accuracy and drift alerts."""

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User

from monitoring.checks import quality_check_run
from monitoring.models import Alert, MonitoringPolicy, QualityCheck
from monitoring.window import scheduled_window
from registry.models import RegisteredModel
from tests.clock import T0
from tests.platform.dashboard.browser.conftest import Tab
from tests.platform.monitoring.factories import monitored_model, rows, send

PASSWORD = "pw-browser-12345"


def _check(model: RegisteredModel, end: datetime) -> QualityCheck:
    check = quality_check_run(
        model_id=model.pk, window=scheduled_window(MonitoringPolicy.objects.get(model=model), end)
    )
    assert check is not None
    return check


@pytest.fixture
def story(transactional_db: None) -> dict[str, Any]:
    User.objects.create_user("ops", password=PASSWORD, is_staff=True)
    model = monitored_model("sea", reference_rows=600, window_size=300, min_samples=100, min_labels=100)
    send(model, rows(300, seed=2), start=T0, prefix="good")
    good = _check(model, T0 + timedelta(hours=1))
    send(model, rows(300, seed=3, shift=1.5, flip=0.4), start=T0 + timedelta(hours=1), prefix="bad")
    bad = _check(model, T0 + timedelta(hours=2))
    return {"model": model, "good": good, "bad": bad}


def test_every_page_renders_without_console_errors_or_failed_requests(
    tab_for: Callable[[str, str], Tab], story: dict[str, Any]
) -> None:
    tab = tab_for("ops", PASSWORD)
    tab.visit("/", "home")
    tab.visit("/models/sea/", "model")
    tab.visit(f"/checks/{story['bad'].pk}/", "check")
    tab.visit("/alerts/", "alerts")


def test_model_page_chart_draws_its_points_and_the_heat_map_its_cells(
    tab_for: Callable[[str, str], Tab], story: dict[str, Any]
) -> None:
    page = tab_for("ops", PASSWORD).visit("/models/sea/", "model")
    assert page.locator("figure.chart circle.pt.s-realised").count() == 2
    assert page.locator("figure.chart circle.pt.s-estimated").count() == 2
    # One cell per (feature or prediction row) × check column; both checks drew a column.
    columns = page.locator("table.heatmap th.col").count()
    rows = page.locator("table.heatmap tbody tr:not(.share-row)").count()
    assert columns == 2 and rows >= 4  # x1, x2, segment, ..., prediction
    assert page.locator("table.heatmap td.cell").count() == rows * columns
    assert page.locator("table.heatmap td.cell.drifted").count() >= 1


def test_acknowledging_an_alert_in_the_browser_moves_it_along(
    tab_for: Callable[[str, str], Tab], story: dict[str, Any]
) -> None:
    tab = tab_for("ops", PASSWORD)
    page = tab.visit("/alerts/?state=open", "alerts-open")
    alert = Alert.objects.filter(model=story["model"], state="open").order_by("pk").first()
    assert alert is not None
    page.locator(f"tr#alert-{alert.pk} button", has_text="Acknowledge").click()
    tab.settle("after acknowledge")
    alert.refresh_from_db()
    assert alert.state == "acknowledged"


def test_run_check_now_in_the_browser_adds_a_check(
    tab_for: Callable[[str, str], Tab], story: dict[str, Any]
) -> None:
    tab = tab_for("ops", PASSWORD)
    page = tab.visit("/models/sea/", "model")
    before = QualityCheck.objects.filter(model=story["model"]).count()
    page.get_by_role("button", name="Run check now").click()
    tab.settle("after run check")
    assert QualityCheck.objects.filter(model=story["model"]).count() == before + 1
