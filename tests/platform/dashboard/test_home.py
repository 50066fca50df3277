"""The home page: one status per model, a sparkline of its recent checks, search and filters,
all read from check, alert and job rows (never a count over the raw samples)."""

from typing import Any

from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from dashboard.presenters import model_status, sparkline
from retraining.models import RetrainJob
from tests.platform.monitoring.factories import monitored_model


def test_a_model_with_drift_alerts_is_drifting(staff: Client, story: dict[str, Any]) -> None:
    page = staff.get("/").content.decode()
    assert '<span class="status-pill st-drifting">drifting</span>' in page


def test_a_model_with_a_live_retrain_job_is_retraining(staff: Client, story: dict[str, Any]) -> None:
    RetrainJob.objects.create(model=story["model"], trigger="admin")
    page = staff.get("/").content.decode()
    assert '<span class="status-pill st-retraining">retraining</span>' in page


def test_status_order_is_retraining_drifting_warning_healthy() -> None:
    assert model_status(latest=None, open_alerts=0, drift_alerts=0, active_jobs=0) == "no data"
    assert model_status(latest=None, open_alerts=2, drift_alerts=0, active_jobs=0) == "warning"
    assert model_status(latest=None, open_alerts=2, drift_alerts=1, active_jobs=0) == "drifting"
    assert model_status(latest=None, open_alerts=2, drift_alerts=1, active_jobs=1) == "retraining"


def test_home_draws_a_sparkline_of_the_recent_checks(staff: Client, story: dict[str, Any]) -> None:
    page = staff.get("/").content.decode()
    assert '<polyline class="spark-real" points="' in page
    assert sparkline([0.9, None, 0.8]).count(",") == 2 and sparkline([0.9]) == ""


def test_home_search_and_status_filter_narrow_the_list(staff: Client, story: dict[str, Any]) -> None:
    monitored_model("other", reference_rows=300)
    assert 'href="/models/other/"' in staff.get("/").content.decode()
    searched = staff.get("/?q=SE").content.decode()
    assert 'href="/models/sea/"' in searched and 'href="/models/other/"' not in searched
    filtered = staff.get("/?status=no+data").content.decode()
    assert 'href="/models/other/"' in filtered and 'href="/models/sea/"' not in filtered


def test_home_and_model_page_never_read_the_raw_samples(staff: Client, story: dict[str, Any]) -> None:
    for path in ("/", "/models/sea/"):
        with CaptureQueriesContext(connection) as queries:
            assert staff.get(path).status_code == 200
        raw = [
            q["sql"]
            for q in queries
            if "monitoring_predictionsample" in q["sql"] or "monitoring_groundtruth" in q["sql"]
        ]
        assert raw == [], (path, raw)
