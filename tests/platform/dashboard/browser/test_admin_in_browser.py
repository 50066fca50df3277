"""The admin's busiest changelists fit a 1440 px screen: no sideways scrolling of the page."""

from collections.abc import Callable
from datetime import timedelta

import pytest
from django.contrib.auth.models import User

from monitoring.checks import quality_check_run
from monitoring.models import Alert, MonitoringPolicy
from monitoring.window import scheduled_window
from registry.models import ModelVersion
from registry.services import version_create
from retraining.models import Decision, JobState, RetrainJob, Trigger
from tests.clock import T0
from tests.platform.dashboard.browser.conftest import Tab
from tests.platform.monitoring.factories import monitored_model, rows, send

PASSWORD = "pw-admin-browser-12345"
CHANGELISTS = {
    "quality checks": "/admin/monitoring/qualitycheck/",
    "alerts": "/admin/monitoring/alert/",
    "retrain jobs": "/admin/retraining/retrainjob/",
    "model versions": "/admin/registry/modelversion/",
}


@pytest.fixture
def busy_admin(transactional_db: None) -> None:
    """Rows with long values in every column those lists show: a drifted check with its alerts,
    a long model name, versions with a long source, and finished and failed retrain jobs."""
    User.objects.create_superuser("root", "root@localhost", PASSWORD)
    model = monitored_model(
        "churn-prediction-eu-west-production",
        reference_rows=600,
        window_size=300,
        min_samples=100,
        min_labels=100,
    )
    policy = MonitoringPolicy.objects.get(model=model)
    send(model, rows(300, seed=2), start=T0, prefix="good")
    quality_check_run(model_id=model.pk, window=scheduled_window(policy, T0 + timedelta(hours=1)))
    send(model, rows(300, seed=3, shift=1.5, flip=0.4), start=T0 + timedelta(hours=1), prefix="bad")
    quality_check_run(model_id=model.pk, window=scheduled_window(policy, T0 + timedelta(hours=2)))
    assert Alert.objects.filter(model=model).exists()
    champion = ModelVersion.objects.filter(model=model).first()
    challenger = version_create(model=model, metrics={"accuracy": 0.9}, config={}, parent=champion,
                                source="retrain job #12345 (alert accuracy_drop #678)")  # fmt: skip
    RetrainJob.objects.create(
        model=model, state=JobState.SUCCEEDED, trigger=Trigger.ALERT, decision=Decision.AWAITING_APPROVAL,
        result_version=challenger, estimated_peak_bytes=12_884_901_888, measured_peak_bytes=12_348_030_976,
        wall_seconds=1234.567891, error="",
    )  # fmt: skip
    RetrainJob.objects.create(
        model=model, state=JobState.FAILED, trigger=Trigger.ADMIN, estimated_peak_bytes=1_073_741_824,
        error="RecipeError: " + "the factory module could not be imported " * 5,
    )  # fmt: skip


@pytest.mark.parametrize("tab_for", ["desktop"], indirect=True)
@pytest.mark.parametrize("name", list(CHANGELISTS))
def test_admin_changelist_fits_a_1440px_screen(
    tab_for: Callable[[str, str], Tab], busy_admin: None, name: str
) -> None:
    tab = tab_for("root", PASSWORD)
    page = tab.visit(CHANGELISTS[name], f"admin {name}")  # asserts no overflow, saves a screenshot
    assert page.locator("#result_list tbody tr").count() >= 1
    # The table itself fits too (the admin would otherwise scroll it inside its own box).
    table_overflow = page.evaluate(
        "(() => { const r = document.querySelector('#changelist .results'); return r.scrollWidth - r.clientWidth; })()"
    )
    assert table_overflow <= 0, f"{name}: the table scrolls sideways by {table_overflow}px"
