"""The GPU and retraining pages in headless Chromium at desktop and phone widths, and a retrain
followed live: staff press "Retrain now", a real Celery worker trains the job, and the model page
shows the progress bar advancing and the job succeeding without a reload."""

from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User

from retraining.inventory import DeviceReport, devices_report
from retraining.models import JobState, RetrainJob
from retraining.placement import jobs_place
from retraining.requests import job_request
from tests.platform.dashboard.browser.conftest import Tab
from tests.platform.retraining.factories import RECIPE, drifted_model, retrainable_model, run, serve
from workers.placement.devices import GIB

PASSWORD = "pw-browser-12345"
# Long enough (a thousand epochs of a small MLP, tens of seconds) for many 2 s live refreshes.
SLOW = replace(RECIPE, epochs=1000, early_stopping_patience=0)


@pytest.fixture
def fleet(transactional_db: None) -> dict[str, Any]:
    """A finished CPU job, then a simulated GPU with a second model's job placed on it."""
    User.objects.create_user("ops", password=PASSWORD, is_staff=True)
    finished = run(drifted_model())
    devices_report(host="node-a", devices=[DeviceReport(0, "sim0", 24 * GIB, 24 * GIB, simulated=True)])
    other = retrainable_model("other")
    t0 = datetime.now(UTC) - timedelta(hours=2)
    serve(other, 900, concept=1, seed=12, start=t0, prefix="o")
    placed = job_request(model=other, trigger="api")
    assert jobs_place() == 1
    return {"finished": finished, "placed": placed}


def test_gpu_and_retraining_pages_render_without_errors_or_overflow(
    tab_for: Callable[[str, str], Tab], fleet: dict[str, Any]
) -> None:
    tab = tab_for("ops", PASSWORD)
    finished, placed = fleet["finished"], fleet["placed"]
    gpu = tab.visit("/gpu/", "gpu")
    assert gpu.locator("tr.placement-row", has_text=f"#{placed.pk}").count() == 1
    jobs = tab.visit("/retraining/", "retraining")
    assert jobs.locator("tr.job-row").count() == 2
    bar = jobs.locator(f"tr#job-{finished.pk} progress")
    assert bar.get_attribute("value") == bar.get_attribute("max") == str(finished.progress["epochs"])
    assert jobs.locator(f"tr#job-{placed.pk}", has_text="node-a:0").count() == 1
    detail = tab.visit(f"/retraining/{finished.pk}/", "retrain-job")
    assert detail.locator("polyline.loss-line").count() == 1
    assert detail.locator("ol.job-log li").count() >= 5
    tab.visit(f"/retraining/{placed.pk}/", "retrain-job-queued")


@pytest.fixture
def training_worker(transactional_db: None) -> Iterator[object]:
    """A real Celery worker (solo pool, in a thread) on the default, checks and training queues."""
    from celery.contrib.testing.worker import start_worker

    from workers import queues
    from workers.celery_app import app

    app.control.purge()
    with start_worker(app, pool="solo", perform_ping_check=False, shutdown_timeout=60,
                      queues=[queues.DEFAULT, queues.CHECKS, queues.TRAINING]) as worker:  # fmt: skip
        yield worker


def _bar(page: Any) -> tuple[int, int]:
    bar = page.locator("#model-retraining progress").first
    return int(bar.get_attribute("value")), int(bar.get_attribute("max"))


# One width: the live refresh is the same script at both (about 30 s of training each); the pages'
# layout at 390 px, a queued and a finished job included, is the test above's.
@pytest.mark.parametrize("tab_for", ["desktop"], indirect=True)
def test_staff_trigger_a_retrain_and_watch_it_progress_to_success_without_reload(
    tab_for: Callable[[str, str], Tab], transactional_db: None, training_worker: object
) -> None:
    User.objects.create_user("ops", password=PASSWORD, is_staff=True)
    model = drifted_model(recipe=SLOW)
    tab = tab_for("ops", PASSWORD)
    page = tab.visit(f"/models/{model.name}/", "model-before-retrain")
    page.get_by_role("button", name="Retrain now").click()
    page.wait_for_load_state("networkidle")
    job = RetrainJob.objects.get(model=model)
    page.evaluate("window.__notReloaded = true")  # gone if the page navigates again
    page.wait_for_function(
        "() => { const p = document.querySelector('#model-retraining progress');"
        " return p && p.value > 0 && p.value < p.max; }",
        timeout=180_000,
    )
    first, epochs = _bar(page)
    tab.screenshot("retrain-in-progress")
    page.wait_for_function(
        f"() => {{ const p = document.querySelector('#model-retraining progress');"
        f" return p && p.value > {first}; }}",
        timeout=180_000,
    )
    page.wait_for_function(
        "() => document.querySelector('#model-retraining .job-state.succeeded') !== null", timeout=300_000
    )
    assert _bar(page) == (epochs, epochs) and epochs == SLOW.epochs
    assert page.evaluate("window.__notReloaded === true")
    tab.settle("retrain-succeeded")
    job.refresh_from_db()
    assert job.state == JobState.SUCCEEDED and job.progress["epoch"] == SLOW.epochs
