"""The model page's champion vs challenger and policy form in headless Chromium, at desktop and
phone widths: what a user sees and clicks, with no console error and no sideways overflow."""

from collections.abc import Callable
from datetime import UTC, datetime

import pytest
from django.contrib.auth.models import User

from monitoring.checks import quality_check_run
from monitoring.models import MonitoringPolicy
from monitoring.window import scheduled_window
from registry.models import ModelVersion, VersionStatus
from retraining.models import Decision, RetrainJob
from tests.platform.dashboard.browser.conftest import Tab
from tests.platform.monitoring.factories import monitored_model
from tests.platform.retraining.factories import drifted_model, run

PASSWORD = "pw-browser-12345"


@pytest.fixture
def staff(transactional_db: None) -> None:
    User.objects.create_user("ops", password=PASSWORD, is_staff=True)


@pytest.fixture
def awaiting(staff: None) -> RetrainJob:
    model = drifted_model(promotion="manual")
    policy = MonitoringPolicy.objects.get(model=model)
    assert quality_check_run(model_id=model.pk, window=scheduled_window(policy, datetime.now(UTC)))
    job = run(model)
    assert job.decision == Decision.AWAITING_APPROVAL
    return job


def _refused(tab: Tab, path: str) -> None:
    """The refused form answers 400 on purpose, which Chromium also logs to the console: take
    exactly those two reports out of the page's problems, and leave any other."""
    expected = [
        f"HTTP 400 {tab.base_url}{path}",
        "console error: Failed to load resource: the server responded with a status of 400 (Bad Request)",
    ]
    assert sorted(tab.problems) == sorted(expected), tab.problems
    tab.problems.clear()


def test_champion_and_challenger_side_by_side_then_approve_in_the_challenger_column(
    tab_for: Callable[[str, str], Tab], awaiting: RetrainJob
) -> None:
    tab = tab_for("ops", PASSWORD)
    page = tab.visit("/models/concept/", "champion-vs-challenger")
    versus = page.locator("table.versus")
    assert versus.locator("th.side").all_inner_texts() == ["Champion", "Challenger"]
    assert versus.locator("tr", has_text="trained from").locator("td").all_inner_texts() == ["—", "v1"]
    realised = versus.locator("td.realised").first.inner_text()
    assert realised.split()[0].replace(".", "", 1).isdigit(), realised  # the champion's checked window
    assert page.locator("table.gate tr", has_text="paired test").count() == 1
    assert (
        versus.locator("td.realised").first.is_visible()
        and versus.locator("button", has_text="Approve").is_visible()
    )

    versus.locator("button", has_text="Approve").click()
    tab.settle("after approve")
    assert page.locator(".no-challenger").is_visible()
    assert page.locator("table.versus button", has_text="Roll back to v1").is_visible()
    challenger = awaiting.result_version
    assert challenger is not None
    assert ModelVersion.objects.get(model=awaiting.model, status=VersionStatus.CHAMPION).pk == challenger.pk


def test_policy_form_refuses_a_bad_value_beside_its_field_then_saves_a_good_one(
    tab_for: Callable[[str, str], Tab], staff: None
) -> None:
    model = monitored_model("sea", reference_rows=300, alert_k=2, alert_n=3)
    tab = tab_for("ops", PASSWORD)
    page = tab.visit("/models/sea/", "policy")
    page.locator("details#policy-edit summary").click()
    page.fill("#policy-alert_k", "9")
    page.get_by_role("button", name="Save policy").click()
    page.wait_for_load_state("networkidle")
    _refused(tab, "/models/sea/policy")
    tab.settle("policy refused")
    assert page.locator("#policy-alert_k-error").inner_text() == "must be <= alert_n (3)"
    assert page.locator("#policy-alert_k").input_value() == "9", "what was typed stays, to correct it"
    assert MonitoringPolicy.objects.get(model=model).alert_k == 2

    page.fill("#policy-alert_k", "2")
    page.fill("#policy-tolerance", "0.2")
    page.get_by_role("button", name="Save policy").click()
    tab.settle("policy saved")
    assert page.locator(".msg.success").inner_text().startswith("Policy saved: tolerance = 0.2")
    assert page.locator("table.policy tr", has_text="tolerance").locator("td").inner_text() == "0.2"
    assert MonitoringPolicy.objects.get(model=model).tolerance == 0.2


def test_non_staff_see_the_policy_read_only(tab_for: Callable[[str, str], Tab], staff: None) -> None:
    monitored_model("sea", reference_rows=300)
    User.objects.create_user("viewer", password=PASSWORD)
    page = tab_for("viewer", PASSWORD).visit("/models/sea/", "policy-read-only")
    assert page.locator(".policy-read-only").is_visible() and page.locator("#policy-edit").count() == 0
