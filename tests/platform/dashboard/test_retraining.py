"""The model page's retraining: a staff-only "Retrain now", the job table, approve/reject/rollback."""

import pytest
from django.contrib.auth.models import User
from django.test import Client

from retraining.models import Decision, JobState, RetrainJob
from tests.platform.conftest import make_model
from tests.platform.retraining.factories import drifted_model, run

pytestmark = pytest.mark.django_db


def _client(staff: bool) -> Client:
    client = Client()
    client.force_login(User.objects.create_user("u", password="pw-u-12345678", is_staff=staff))
    return client


def test_staff_retrain_now_queues_a_job() -> None:
    make_model()
    response = _client(staff=True).post("/models/churn/retrain")
    assert response.status_code == 302
    job = RetrainJob.objects.get()
    assert (job.state, job.trigger, job.requested_by.username) == (JobState.QUEUED, "admin", "u")


def test_non_staff_cannot_retrain_and_sees_no_button() -> None:
    make_model()
    client = _client(staff=False)
    assert client.post("/models/churn/retrain").status_code == 403
    assert "Retrain now" not in client.get("/models/churn/").content.decode()
    assert not RetrainJob.objects.exists()


def test_model_page_lists_jobs_with_estimated_and_measured_peak() -> None:
    job = run(drifted_model(promotion="manual"))
    page = _client(staff=True).get("/models/concept/").content.decode()
    assert (
        f"#{job.pk}" in page
        and str(job.estimated_peak_bytes) in page
        and str(job.measured_peak_bytes) in page
    )
    assert "Approve" in page and "Reject" in page


def test_staff_approve_from_the_dashboard_promotes() -> None:
    job = run(drifted_model(promotion="manual"))
    _client(staff=True).post(f"/retrain-jobs/{job.pk}/approve")
    job.refresh_from_db()
    assert job.decision == Decision.PROMOTED
