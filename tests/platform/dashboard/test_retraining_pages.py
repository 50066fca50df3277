"""The retraining pages: every job with live state and a progress bar, one job in full (plan,
estimated vs measured peak, duration, energy, loss per epoch, log), and a staff-only cancel."""

import re

import pytest
from django.contrib.auth.models import User
from django.test import Client

from dashboard.jobs import NO_ENERGY_COUNTER, NOT_MEASURED, plan_text
from dashboard.templatetags.dashboard_extras import bytes as bytes_filter
from retraining.inventory import DeviceReport, devices_report
from retraining.models import GpuPlacement, JobState, RetrainJob
from retraining.placement import jobs_place
from retraining.requests import job_request
from retraining.selectors import job_log_entries
from tests.clock import at
from tests.platform.conftest import make_model
from tests.platform.retraining.factories import drifted_model, run
from workers.placement.devices import GIB

pytestmark = pytest.mark.django_db


def _client(staff: bool) -> Client:
    client = Client()
    client.force_login(User.objects.create_user("u", password="pw-u-12345678", is_staff=staff))
    return client


def _running(epoch: int, epochs: int) -> RetrainJob:
    job = job_request(model=make_model(), trigger="admin")
    history = [[e, 1.0 / e, 1.2 / e] for e in range(1, epoch + 1)]
    progress = {
        "epoch": epoch,
        "epochs": epochs,
        "loss": 1.0 / epoch,
        "val_loss": 1.2 / epoch,
        "history": history,
    }
    RetrainJob.objects.filter(pk=job.pk).update(state=JobState.RUNNING, progress=progress)
    return RetrainJob.objects.get(pk=job.pk)


def test_the_nav_links_the_retraining_page() -> None:
    page = _client(staff=False).get("/").content.decode()
    assert 'href="/retraining/"' in page


def test_a_running_job_shows_a_progress_bar_of_its_epochs_and_refreshes_fast() -> None:
    job = _running(epoch=3, epochs=12)
    page = _client(staff=False).get("/retraining/").content.decode()
    assert f'href="/retraining/{job.pk}/"' in page
    assert re.search(r'<progress value="3" max="12"', page)
    assert "epoch 3/12" in page and "loss 0.333" in page and "val. loss 0.400" in page
    assert 'data-live-every="2"' in page


def test_a_finished_job_shows_plan_duration_a_full_bar_and_honest_energy() -> None:
    job = run(drifted_model())
    RetrainJob.objects.filter(pk=job.pk).update(energy_joules=None)  # a worker without a counter
    page = _client(staff=False).get("/retraining/").content.decode()
    assert job.state == JobState.SUCCEEDED and plan_text(job.plan) in page
    assert f'<progress value="{job.progress["epochs"]}" max="{job.progress["epochs"]}"' in page
    assert 'data-live-every="15"' in page
    assert f'title="{NO_ENERGY_COUNTER}">{NOT_MEASURED}</td>' in page


def test_measured_energy_is_shown_in_joules() -> None:
    job = run(drifted_model())
    RetrainJob.objects.filter(pk=job.pk).update(energy_joules=1234.5)
    page = _client(staff=False).get(f"/retraining/{job.pk}/").content.decode()
    assert "1.23 kJ" in page and NO_ENERGY_COUNTER not in page


def test_the_job_page_shows_plan_peaks_loss_curve_and_log() -> None:
    job = run(drifted_model())
    page = _client(staff=False).get(f"/retraining/{job.pk}/").content.decode()
    assert f"batch {job.plan['batch_size']}" in page
    ratio = job.measured_peak_bytes / job.estimated_peak_bytes
    assert f"({ratio:.2f} × the estimate)" in page
    points = re.search(r'class="line s-realised loss-line" points="([^"]+)"', page)
    assert points and len(points[1].split()) == job.progress["epoch"]
    entries = job_log_entries(job=job)
    assert page.count("<li><time>") == len(entries) and "queued → planned" in page


def test_the_job_page_shows_pace_eta_plan_reasoning_and_each_epochs_estimated_and_measured_peak() -> None:
    job = _running(epoch=2, epochs=10)
    progress = {**job.progress, "steps_per_second": 4.0, "eta_seconds": 120.0,
                "peaks": [[1, 2048, 1024], [2, 2048, 1536]]}  # fmt: skip
    plan = {"batch_size": 8, "reasoning": "batch 8: the largest whose traced training step fits"}
    RetrainJob.objects.filter(pk=job.pk).update(progress=progress, plan=plan)
    page = _client(staff=False).get(f"/retraining/{job.pk}/").content.decode()
    assert "4.000 steps/s" in page
    assert "ETA" in page and "the largest whose traced training step fits" in page
    assert page.count('class="epoch-peak"') == 2 and bytes_filter(1536) in page


def test_log_entries_keep_a_traceback_with_its_step() -> None:
    job = job_request(model=make_model(), trigger="admin")
    stamps = [f"{at(hours=19, seconds=s):%Y-%m-%d %H:%M:%S}" for s in range(3)]  # as joblog writes them
    RetrainJob.objects.filter(pk=job.pk).update(
        log=f"{stamps[0]} queued → planned\n{stamps[1]} failed:\nTraceback (most recent call last):\n"
        f'  File "x.py", line 1\nValueError: bad\n{stamps[2]} → failed: ValueError: bad\n'
    )
    job.refresh_from_db()
    entries = job_log_entries(job=job)
    assert [e.at for e in entries] == stamps
    assert entries[1].message.endswith("ValueError: bad") and entries[1].message.count("\n") == 3


def test_the_state_filter_lists_only_that_state() -> None:
    running = _running(epoch=1, epochs=4)
    other = job_request(model=make_model("other"), trigger="admin")
    RetrainJob.objects.filter(pk=other.pk).update(state=JobState.FAILED)
    page = _client(staff=False).get("/retraining/?state=failed").content.decode()
    assert f'id="job-{other.pk}"' in page and f'id="job-{running.pk}"' not in page
    assert "active (1)" in page and "failed (1)" in page


def test_staff_cancel_on_the_job_page_cancels_a_queued_job_and_comes_back() -> None:
    job = job_request(model=make_model(), trigger="admin")
    client = _client(staff=True)
    page = client.get(f"/retraining/{job.pk}/").content.decode()
    assert "cancel-job" in page
    response = client.post(f"/retrain-jobs/{job.pk}/cancel", {"next": f"/retraining/{job.pk}/"})
    assert response.status_code == 302 and response["Location"] == f"/retraining/{job.pk}/"
    job.refresh_from_db()
    assert job.state == JobState.CANCELLED
    assert "cancel-job" not in client.get(f"/retraining/{job.pk}/").content.decode()


def test_cancelling_a_running_job_from_the_page_says_it_stops_at_the_next_heartbeat() -> None:
    job = _running(epoch=2, epochs=10)
    client = _client(staff=True)
    response = client.post(f"/retrain-jobs/{job.pk}/cancel", {"next": "/retraining/"}, follow=True)
    page = response.content.decode()
    assert "cancel requested; the worker stops at its next heartbeat" in page
    assert "cancel requested</small>" in page and "cancel-job" not in page


def test_non_staff_see_no_cancel_button_and_cannot_cancel() -> None:
    job = job_request(model=make_model(), trigger="admin")
    client = _client(staff=False)
    assert "cancel-job" not in client.get(f"/retraining/{job.pk}/").content.decode()
    assert client.post(f"/retrain-jobs/{job.pk}/cancel").status_code == 403
    job.refresh_from_db()
    assert job.state == JobState.QUEUED


def test_an_unknown_job_is_a_404() -> None:
    assert _client(staff=False).get("/retraining/999999/").status_code == 404


def test_the_model_page_links_its_jobs_and_shows_their_progress() -> None:
    job = _running(epoch=5, epochs=8)
    page = _client(staff=False).get(f"/models/{job.model.name}/").content.decode()
    assert f'href="/retraining/{job.pk}/"' in page and '<progress value="5" max="8"' in page
    assert 'id="model-retraining"' in page and 'data-live-every="2"' in page


def test_a_job_placed_on_a_gpu_shows_the_plan_and_estimate_it_was_sized_with() -> None:
    devices_report(host="node-a", devices=[DeviceReport(0, "sim0", 24 * GIB, 24 * GIB, simulated=True)])
    job = job_request(model=drifted_model(), trigger="admin")
    assert jobs_place() == 1
    placement = GpuPlacement.objects.get(job=job)
    page = _client(staff=False).get(f"/retraining/{job.pk}/").content.decode()
    assert plan_text(placement.plan) in page and "node-a:0 sim0 (simulated)" in page
    assert f"{bytes_filter(placement.plan['estimated_bytes'])} <small>(sized for placement)</small>" in page
