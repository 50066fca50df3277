"""The dashboard pages, rendered over real checks and alerts made through the monitoring services."""

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from monitoring.models import Alert, MonitoringPolicy, QualityCheck
from monitoring.reports import check_report_render
from registry.services import model_register
from tests.platform.dashboard.conftest import T0, run_check
from tests.platform.monitoring.factories import monitored_model, rows, send


@pytest.mark.parametrize("path", ["/", "/models/sea/", "/checks/1/", "/checks/1/report", "/alerts/"])
def test_anonymous_visitors_are_sent_to_the_dashboard_login(db: None, path: str) -> None:
    response = Client().get(path)
    assert response.status_code == 302
    assert response["Location"].startswith("/login/?next=")


def test_home_lists_each_model_with_its_latest_check_and_open_alerts(
    staff: Client, story: dict[str, Any]
) -> None:
    page = staff.get("/").content.decode()
    assert 'href="/models/sea/"' in page
    assert f"{story['bad'].metrics['accuracy']:.3f}" in page
    assert f"{story['bad'].estimated['value']:.3f}" in page
    live = Alert.objects.filter(model=story["model"], state="open").count()
    assert live >= 2 and f"{live} open" in page  # accuracy_drop, data_drift, maybe prediction_drift


def test_model_page_draws_the_quality_chart_as_svg(staff: Client, story: dict[str, Any]) -> None:
    page = staff.get("/models/sea/").content.decode()
    assert "<svg" in page
    assert '<path class="line s-realised" d="M' in page
    assert '<path class="band s-realised" d="M' in page
    assert '<path class="line s-estimated" d="M' in page
    assert 'class="h-tolerance"' in page and 'class="h-baseline"' in page


def test_model_page_heat_map_has_a_row_per_feature_and_the_prediction(
    staff: Client, story: dict[str, Any]
) -> None:
    page = staff.get("/models/sea/").content.decode()
    heatmap = page.split('<table class="heatmap">')[1].split("</table>")[0]
    for name in ("x1", "x2", "segment", "prediction"):
        assert f'<th class="feat">{name}</th>' in heatmap
    assert 'class="cell drifted"' in heatmap
    assert 'title="x1 · ' in heatmap and "· threshold " in heatmap


def test_model_page_lists_alerts_checks_and_policy(staff: Client, story: dict[str, Any]) -> None:
    page = staff.get("/models/sea/").content.decode()
    assert story["alert"].message in page
    assert f'href="/checks/{story["good"].pk}/"' in page and f'href="/checks/{story["bad"].pk}/"' in page
    assert "Run check now" in page
    assert "last 400 samples" in page


def test_pages_render_when_a_check_had_too_little_data(staff: Client) -> None:
    model = monitored_model("thin", reference_rows=300)
    send(model, rows(20, seed=6), start=T0, prefix="a", labelled=False)
    check = run_check(model, T0 + timedelta(hours=1))
    assert check.metrics == {} and check.drift == {}
    assert staff.get("/models/thin/").status_code == 200
    page = staff.get(f"/checks/{check.pk}/").content.decode()
    assert "Too few labels for realised metrics" in page


def test_model_page_without_any_check_says_so(staff: Client) -> None:
    monitored_model("fresh", reference_rows=300)
    page = staff.get("/models/fresh/").content.decode()
    assert "No finished check yet" in page and "No alerts." in page


def test_regression_model_charts_rmse_with_tolerance_above_baseline(staff: Client) -> None:
    model = model_register(
        data={"name": "price", "task": "regression", "features": [{"name": "area", "type": "numerical"}]}
    )
    MonitoringPolicy.objects.create(model=model, metric="rmse", tolerance=0.5, baseline=2.0)
    for hour, rmse in enumerate([1.9, 2.4, 3.1]):
        QualityCheck.objects.create(
            model=model,
            window_spec="24h",
            window_start=T0,
            window_end=T0 + timedelta(hours=hour),
            state="done",
            started_at=timezone.now(),
            n_samples=100,
            n_labelled=100,
            metrics={"n": 100, "mae": rmse / 2, "rmse": rmse, "r2": 0.5, "rmse_ci": [rmse - 0.2, rmse + 0.2]},
            decisions={"baseline": 2.0, "metric": "rmse", "value": rmse, "tolerance": 0.5},
        )
    page = staff.get("/models/price/").content.decode()
    assert '<path class="line s-realised" d="M' in page
    assert "tolerance 2.50" in page and "s-estimated" not in page


def test_check_page_shows_metrics_drift_and_data_quality(staff: Client, story: dict[str, Any]) -> None:
    bad = story["bad"]
    page = staff.get(f"/checks/{bad.pk}/").content.decode()
    assert "Confusion matrix" in page and "Per class" in page
    assert "Estimate vs realised" in page and f"{bad.estimated['error']:+.4f}" in page
    for name in ("x1", "x2", "segment"):
        assert f"{name}</td>" in page
    assert "dataset drift</b>" in page
    assert "Feed healthy" in page
    assert "&quot;accuracy_drop&quot;: true" in page


def test_check_page_states_an_estimate_made_from_a_sample_of_rows(
    staff: Client, story: dict[str, Any]
) -> None:
    """A DLE estimate past SAMPLE_ABOVE says it is the mean over a sample, and its error."""
    bad = story["bad"]
    assert "uniform sample" not in staff.get(f"/checks/{bad.pk}/").content.decode()
    sample = {"rows": 1_000_000, "of": 3_000_000, "error": 0.000436}
    QualityCheck.objects.filter(pk=bad.pk).update(estimated={**bad.estimated, "sample": sample})
    page = staff.get(f"/checks/{bad.pk}/").content.decode()
    assert "a uniform sample of 1000000 of the window's 3000000 rows (standard error 0.0004, in the" in page


def test_missing_check_is_404(staff: Client, db: None) -> None:
    assert staff.get("/checks/999999/").status_code == 404


def test_acknowledge_then_resolve_moves_the_alert_along(staff: Client, story: dict[str, Any]) -> None:
    alert = story["alert"]
    response = staff.post(f"/alerts/{alert.pk}/acknowledge", {"next": "/alerts/"})
    assert response.status_code == 302 and response["Location"] == "/alerts/"
    alert.refresh_from_db()
    assert alert.state == "acknowledged" and alert.acknowledged_at is not None
    staff.post(f"/alerts/{alert.pk}/resolve")
    alert.refresh_from_db()
    assert alert.state == "resolved" and alert.resolved_at is not None


def test_alert_actions_refuse_get_and_foreign_redirects(staff: Client, story: dict[str, Any]) -> None:
    alert = story["alert"]
    assert staff.get(f"/alerts/{alert.pk}/acknowledge").status_code == 405
    response = staff.post(f"/alerts/{alert.pk}/acknowledge", {"next": "https://evil.example/"})
    assert response["Location"] == "/models/sea/"


def test_alerts_page_filters_by_state(staff: Client, story: dict[str, Any]) -> None:
    alert = story["alert"]
    staff.post(f"/alerts/{alert.pk}/resolve")
    resolved = staff.get("/alerts/?state=resolved").content.decode()
    opened = staff.get("/alerts/?state=open").content.decode()
    assert alert.message in resolved and alert.message not in opened
    assert "data drift: " in opened and "data drift: " not in resolved
    assert alert.message in staff.get("/alerts/").content.decode()


def test_report_is_404_until_rendered_then_served_as_html(staff: Client, story: dict[str, Any]) -> None:
    check = story["bad"]
    assert staff.get(f"/checks/{check.pk}/report").status_code == 404
    assert f'/checks/{check.pk}/report"' not in staff.get(f"/checks/{check.pk}/").content.decode()
    check_report_render(check_id=check.pk)
    response = staff.get(f"/checks/{check.pk}/report")
    assert response.status_code == 200 and response["Content-Type"].startswith("text/html")
    body = b"".join(response.streaming_content)  # type: ignore[attr-defined]
    assert b"<html" in body.lower()
    assert f'/checks/{check.pk}/report"' in staff.get(f"/checks/{check.pk}/").content.decode()


def test_generate_report_button_queues_the_rendering(
    staff: Client, story: dict[str, Any], django_capture_on_commit_callbacks: Any
) -> None:
    check = story["good"]
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = staff.post(f"/checks/{check.pk}/report/request")
    assert response.status_code == 302 and len(callbacks) == 1
    check.refresh_from_db()
    assert check.report_requested_at is not None


def test_run_check_button_creates_a_check(staff: Client, story: dict[str, Any]) -> None:
    before = QualityCheck.objects.filter(model=story["model"]).count()
    response = staff.post("/models/sea/checks/run")
    assert response.status_code == 302 and response["Location"] == "/models/sea/"
    assert QualityCheck.objects.filter(model=story["model"]).count() == before + 1
    newest = QualityCheck.objects.filter(model=story["model"]).order_by("-pk").first()
    assert newest is not None and newest.state == "done" and newest.n_samples == 400


def test_run_check_is_for_staff_only(db: None) -> None:
    monitored_model("sea", reference_rows=300)
    user = User.objects.create_user("viewer", password="pw-viewer-1234")
    client = Client()
    client.force_login(user)
    assert client.post("/models/sea/checks/run").status_code == 403
    assert "Run check now" not in client.get("/models/sea/").content.decode()
    assert not QualityCheck.objects.exists()
