"""The evidently report holds ingested values: it is served so that nothing in it can act on the app."""

from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.test import Client

from monitoring.checks import quality_check_run
from monitoring.models import MonitoringPolicy, QualityCheck
from monitoring.reports import check_report_render
from monitoring.window import scheduled_window
from tests.clock import T0
from tests.platform.monitoring.factories import monitored_model, rows, send

PAYLOAD = "</script><script>fetch('/alerts/1/resolve',{method:'POST'})</script>"


@pytest.fixture
def viewer(db: None) -> Client:
    client = Client()
    client.force_login(User.objects.create_user("viewer", password="pw-viewer-12345"))
    return client


def hostile_report_check() -> QualityCheck:
    model = monitored_model(reference_rows=300)
    data = rows(300, seed=2)
    for row in data[::3]:
        row["features"]["segment"] = PAYLOAD
    send(model, data, start=T0, prefix="h")
    policy = MonitoringPolicy.objects.get(model=model)
    check = quality_check_run(model_id=model.pk, window=scheduled_window(policy, T0 + timedelta(hours=1)))
    assert check is not None
    check_report_render(check_id=check.pk)
    return check


def directives(header: str) -> dict[str, str]:
    parts = [p.strip().split(" ", 1) for p in header.split(";") if p.strip()]
    return {p[0]: (p[1] if len(p) > 1 else "") for p in parts}


def test_report_is_served_in_a_sandbox_that_cannot_reach_the_app(viewer: Client) -> None:
    check = hostile_report_check()
    response = viewer.get(f"/checks/{check.pk}/report")
    assert response.status_code == 200
    policy = directives(response["Content-Security-Policy"])
    # An opaque origin: no access to the app's cookies, DOM or same-origin requests.
    assert "sandbox" in policy and "allow-same-origin" not in policy["sandbox"]
    assert policy["connect-src"] == "'none'" and policy["form-action"] == "'none'"
    assert policy["default-src"] == "'none'" and policy["frame-ancestors"] == "'none'"


def test_report_embeds_ingested_values_escaped(viewer: Client) -> None:
    check = hostile_report_check()
    body = b"".join(viewer.get(f"/checks/{check.pk}/report").streaming_content).decode()  # type: ignore[attr-defined]
    assert PAYLOAD not in body
    assert "\\u003c/script\\u003e\\u003cscript\\u003efetch(" in body
