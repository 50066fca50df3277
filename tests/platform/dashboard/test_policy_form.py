"""The model page's policy form: monitoring's validation, the API's messages, staff only, CSRF."""

import html
import re
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from rest_framework.test import APIClient

from core.models import AuditEvent
from dashboard.policy_form import policy_form_fields
from monitoring.models import MonitoringPolicy
from monitoring.selectors import policy_for
from registry.models import RegisteredModel
from registry.services import model_register
from tests.platform.monitoring.factories import monitored_model

pytestmark = pytest.mark.django_db

PAGE, FORM, API = "/models/sea/", "/models/sea/policy", "/api/v1/models/sea/policy"


def _client(staff: bool = True, **kwargs: Any) -> Client:
    client = Client(**kwargs)
    name = "ops" if staff else "viewer"
    client.force_login(User.objects.create_user(name, password=f"pw-{name}-12345", is_staff=staff))
    return client


def form_data(model: RegisteredModel, **changes: Any) -> dict[str, Any]:
    """What the browser posts: every field as drawn, a ticked checkbox as "on", an unticked one
    absent; then ``changes`` (None removes a field)."""
    data: dict[str, Any] = {}
    for field in policy_form_fields(policy=policy_for(model)):
        if field["kind"] != "checkbox":
            data[field["name"]] = field["value"]
        elif field["value"]:
            data[field["name"]] = "on"
    data.update(changes)
    return {k: v for k, v in data.items() if v is not None}


def stored(model: RegisteredModel) -> dict[str, Any]:
    policy = MonitoringPolicy.objects.get(model=model)
    return {f.name: getattr(policy, f.name) for f in MonitoringPolicy._meta.fields if f.name != "updated_at"}


def field_error(page: str, field: str) -> str:
    match = re.search(rf'id="policy-{field}-error">([^<]*)<', page)
    return html.unescape(match.group(1)) if match else ""


@pytest.mark.parametrize(
    ("field", "text", "json_value"),
    [
        ("tolerance", "-1", -1),
        ("drift_share", "7", 7),
        ("window_size", "0", 0),
        ("window_size", "1.5", 1.5),
        ("window_size", "abc", "abc"),
        ("baseline", "high", "high"),
        ("tolerance", "nan", None),  # JSON has no NaN literal: the API's raw-token case below
        ("metric", "rmse", "rmse"),  # a regression metric on a classifier
        ("alert_k", "9", 9),  # more than alert_n
    ],
)
def test_an_invalid_value_is_refused_with_the_apis_message_and_nothing_is_stored(
    client_for: Any, field: str, text: str, json_value: Any
) -> None:
    model = monitored_model()
    before = stored(model)
    api: APIClient = client_for("admin")
    if json_value is None:
        api_response = api.generic("PATCH", API, '{"tolerance": NaN}', content_type="application/json")
    else:
        api_response = api.patch(API, {field: json_value}, format="json")
    assert api_response.status_code == 400
    api_message = next(e["message"] for e in api_response.json()["errors"] if e["field"] == field)

    response = _client().post(FORM, form_data(model, **{field: text}))

    assert response.status_code == 400
    page = response.content.decode()
    assert field_error(page, field) == api_message
    assert "Policy not saved" in page
    if field != "metric":  # a text box shows what was typed, to correct it
        assert f'name="{field}" value="{text}"' in page
    assert stored(model) == before
    assert not AuditEvent.objects.filter(action="policy.update").exists()


def test_a_refused_form_on_a_model_without_a_policy_stores_no_policy() -> None:
    model = model_register(
        data={"name": "sea", "task": "classification", "classes": [0, 1],
              "features": [{"name": "x", "type": "numerical"}]}
    )  # fmt: skip
    response = _client().post(FORM, form_data(model, tolerance="-1"))
    assert response.status_code == 400
    assert not MonitoringPolicy.objects.filter(model=model).exists()


def test_a_valid_value_is_stored_audited_and_shown() -> None:
    model = monitored_model()
    response = _client().post(FORM, form_data(model, tolerance="0.2", alert_k="2", alert_n="4"))
    assert response.status_code == 302 and response["Location"].endswith("/models/sea/#policy")
    policy = MonitoringPolicy.objects.get(model=model)
    assert (policy.tolerance, policy.alert_k, policy.alert_n) == (0.2, 2, 4)
    event = AuditEvent.objects.get(action="policy.update")
    assert event.actor_label == "ops" and event.details == {
        "changes": {"tolerance": 0.2, "alert_k": 2, "alert_n": 4}
    }
    page = _client(staff=False).get(PAGE).content.decode()
    assert "<tr><th>tolerance</th><td>0.2</td></tr>" in page
    assert "2 of last 4 checks breach" in page


def test_unticking_a_checkbox_stores_false_and_an_empty_baseline_clears_it() -> None:
    model = monitored_model(baseline=0.9)
    assert policy_for(model).enabled is True
    response = _client().post(FORM, form_data(model, enabled=None, baseline=""))
    assert response.status_code == 302
    policy = MonitoringPolicy.objects.get(model=model)
    assert policy.enabled is False and policy.baseline is None


def test_posting_the_form_unchanged_stores_and_audits_nothing() -> None:
    model = monitored_model()
    before = stored(model)
    response = _client().post(FORM, form_data(model), follow=True)
    assert "Policy unchanged" in response.content.decode()
    assert stored(model) == before and not AuditEvent.objects.exists()


def test_a_regression_model_is_offered_its_own_metrics_and_refused_accuracy_as_the_api_refuses_it(
    client_for: Any,
) -> None:
    model = model_register(
        data={"name": "sea", "task": "regression", "features": [{"name": "x", "type": "numerical"}]}
    )
    staff = _client()
    page = staff.get(PAGE).content.decode()
    options = re.findall(r'<option value="([^"]+)"', page.split('name="metric"')[1].split("</select>")[0])
    assert options == ["mae", "rmse", "r2", "mse"]
    api_message = (
        client_for("admin").patch(API, {"metric": "accuracy"}, format="json").json()["errors"][0]["message"]
    )
    refused = staff.post(FORM, form_data(model, metric="accuracy"))
    assert refused.status_code == 400 and field_error(refused.content.decode(), "metric") == api_message


def test_non_staff_see_the_policy_read_only_and_cannot_post() -> None:
    model = monitored_model()
    before = stored(model)
    client = _client(staff=False)
    page = client.get(PAGE).content.decode()
    assert 'name="tolerance"' not in page and "Read-only" in page
    assert client.post(FORM, form_data(model, tolerance="0.3")).status_code == 403
    assert stored(model) == before


def test_staff_see_the_form_with_the_stored_values() -> None:
    monitored_model(tolerance=0.07)
    page = _client().get(PAGE).content.decode()
    assert re.search(r'name="tolerance" value="0.07"', page)
    assert 'name="csrfmiddlewaretoken"' in page.split('class="policy-form"')[1]


def test_a_post_without_the_csrf_token_is_refused_and_stores_nothing() -> None:
    model = monitored_model()
    before = stored(model)
    response = _client(enforce_csrf_checks=True).post(FORM, form_data(model, tolerance="0.3"))
    assert response.status_code == 403
    assert stored(model) == before
