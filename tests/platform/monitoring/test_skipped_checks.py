"""A window with nothing in it is a skipped check with its reason: no result, drawn nowhere,
deciding nothing, never opening or resolving an alert."""

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import jsonschema
import pytest
from drf_spectacular.generators import SchemaGenerator
from rest_framework.test import APIClient

from monitoring.checks import quality_check_run
from monitoring.models import Alert, CheckState, MonitoringPolicy, QualityCheck
from monitoring.serializers import CheckOut
from monitoring.window import range_window, scheduled_window
from registry.models import RegisteredModel
from tests.clock import T0, at, minute
from tests.platform.monitoring.factories import monitored_model, rows, send, unfed


def run_check(model: RegisteredModel, end: datetime) -> QualityCheck:
    policy = MonitoringPolicy.objects.get(model=model)
    check = quality_check_run(model_id=model.pk, window=scheduled_window(policy, end))
    assert check is not None
    return QualityCheck.objects.get(pk=check.pk)


def hourly_model(**policy: Any) -> RegisteredModel:
    return monitored_model(
        reference_rows=600, window_kind="hours", window_size=1, min_samples=100, min_labels=100, **policy
    )


@pytest.mark.django_db
def test_the_first_check_before_any_traffic_is_skipped_with_its_reason() -> None:
    check = run_check(hourly_model(), T0)
    assert check.state == CheckState.SKIPPED
    assert check.skipped_reason == f"no predictions between {minute(at(hours=-1))} UTC and {minute(T0)} UTC"
    assert (check.n_samples, check.metrics, check.drift, check.decisions) == (0, {}, {}, {})
    assert check.finished_at is not None and check.error == ""


@pytest.mark.django_db
def test_a_labelled_window_without_any_label_is_skipped() -> None:
    model = monitored_model(reference_rows=300, window_kind="labelled", window_size=200)
    send(model, rows(300, seed=2), start=T0, prefix="a", labelled=False)
    check = run_check(model, T0 + timedelta(hours=1))
    assert check.state == CheckState.SKIPPED
    assert check.skipped_reason == f"no labelled predictions before {minute(at(hours=1))} UTC"


@pytest.mark.django_db
def test_a_window_with_few_samples_is_a_real_check_not_a_skipped_one() -> None:
    """Below min_samples a check still measures data quality and label stats; only nothing is skipped."""
    model = hourly_model()
    send(model, rows(5, seed=2), start=T0, prefix="a")
    check = run_check(model, T0 + timedelta(hours=1))
    assert (check.state, check.n_samples, check.skipped_reason) == (CheckState.DONE, 5, "")
    assert check.decisions["data_drift"] is None


@pytest.mark.django_db
def test_a_skipped_check_neither_resolves_nor_touches_an_open_alert() -> None:
    model = hourly_model(resolve_after=1)
    send(model, rows(400, seed=3, flip=0.45), start=T0, prefix="bad", step=timedelta(seconds=5))
    bad = run_check(model, T0 + timedelta(hours=1))
    alert = Alert.objects.get(model=model, kind="accuracy_drop")
    skipped = run_check(model, T0 + timedelta(hours=2))  # nothing arrived in that hour
    assert skipped.state == CheckState.SKIPPED
    alert.refresh_from_db()
    assert (alert.state, alert.last_check_id, alert.resolved_by_check_id) == ("open", bad.pk, None)
    send(model, rows(400, seed=4), start=T0 + timedelta(hours=2), prefix="good", step=timedelta(seconds=5))
    good = run_check(model, T0 + timedelta(hours=3))
    alert.refresh_from_db()
    assert (alert.state, alert.resolved_by_check_id) == ("resolved", good.pk)


@pytest.mark.django_db
def test_a_skipped_check_opens_no_alert_and_feeds_no_label_to_the_detector() -> None:
    model = hourly_model()
    send(model, rows(200, seed=3, flip=0.45), start=T0 - timedelta(hours=3), prefix="old")
    run_check(model, T0)
    assert not Alert.objects.filter(model=model).exists()
    assert len(unfed(model)) == 200, "every label still waits"


@pytest.mark.django_db
def test_a_skipped_window_is_looked_at_again_once_predictions_arrive() -> None:
    model = hourly_model()
    window = range_window(T0, T0 + timedelta(hours=1))
    first = quality_check_run(model_id=model.pk, window=window)
    assert first is not None and first.state == CheckState.SKIPPED
    send(model, rows(300, seed=2), start=T0, prefix="late")  # a backfill into that hour
    second = quality_check_run(model_id=model.pk, window=window)
    assert second is not None and second.pk == first.pk
    assert (second.state, second.n_samples, second.skipped_reason) == (CheckState.DONE, 300, "")


def test_the_api_returns_the_state_and_reason_as_its_schema_documents(
    client_for: Callable[[str], APIClient], db: None
) -> None:
    monitored_model("quiet", reference_rows=300)
    body = {"start": T0.isoformat(), "end": (T0 + timedelta(hours=1)).isoformat()}
    posted = client_for("ingest").post("/api/v1/models/quiet/checks", body, format="json")
    assert posted.status_code == 201, posted.json()
    listed = client_for("read").get("/api/v1/models/quiet/checks").json()
    reason = f"no predictions between {minute(T0)} UTC and {minute(at(hours=1))} UTC"
    assert [(c["state"], c["skipped_reason"]) for c in listed] == [("skipped", reason)]
    schema = SchemaGenerator().get_schema(request=None, public=True)
    components = schema["components"]["schemas"]
    assert "skipped" in components["CheckStateEnum"]["enum"]
    out = components["CheckOut"]["properties"]
    assert out["skipped_reason"]["type"] == "string" and out["skipped_reason"].get("nullable") is True
    reason_schema = {k: v for k, v in out["skipped_reason"].items() if k != "nullable"}
    jsonschema.validate(listed[0]["skipped_reason"], reason_schema)
    assert CheckOut(QualityCheck.objects.get()).data["skipped_reason"] == reason
