"""Policy PATCH validation (every bad value a 400 naming the field, nothing stored) and the
metric defaults by task."""

import importlib
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from rest_framework.test import APIClient

from monitoring.models import MonitoringPolicy
from monitoring.selectors import policy_for
from monitoring.services import policy_ensure
from registry.models import RegisteredModel
from registry.services import model_register
from tests.platform.monitoring.factories import monitored_model

POLICY = "/api/v1/models/sea/policy"


def regressor(name: str = "price") -> RegisteredModel:
    return model_register(
        data={"name": name, "task": "regression", "features": [{"name": "x", "type": "numerical"}]}
    )


def stored(name: str = "sea") -> dict[str, Any]:
    policy = MonitoringPolicy.objects.get(model__name=name)
    return {f.name: getattr(policy, f.name) for f in MonitoringPolicy._meta.fields if f.name != "updated_at"}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"metric": "foo"}, "metric"),
        ({"metric": "rmse"}, "metric"),  # a regression metric on a classifier
        ({"tolerance": -1}, "tolerance"),
        ({"tolerance": "0.1"}, "tolerance"),
        ({"drift_share": 7}, "drift_share"),
        ({"drift_share": 0}, "drift_share"),
        ({"alert_k": 3, "alert_n": 1}, "alert_k"),
        ({"window_size": 0}, "window_size"),
        ({"window_size": 1.5}, "window_size"),
        ({"resolve_after": 0}, "resolve_after"),
        ({"enabled": "yes"}, "enabled"),
        ({"baseline": "high"}, "baseline"),
        ({"window_size": 2_147_483_647}, "window_size"),  # hours: every check overflowed
        ({"window_kind": "hours", "window_size": 24 * 367}, "window_size"),
        ({"window_kind": "samples", "window_size": 1_000_001}, "window_size"),
        ({"check_every_minutes": 2_147_483_647}, "check_every_minutes"),
        ({"cooldown_minutes": 2_147_483_647}, "cooldown_minutes"),
        ({"min_samples": 2_147_483_647}, "min_samples"),
        ({"min_labels": 2_147_483_647}, "min_labels"),
        ({"alert_k": 101, "alert_n": 101}, "alert_n"),
        ({"resolve_after": 2_147_483_647}, "resolve_after"),
    ],
)
def test_nonsense_policy_values_are_a_400_naming_the_field_and_store_nothing(
    client_for: Callable[[str], APIClient], db: None, body: dict[str, Any], field: str
) -> None:
    monitored_model()
    before = stored()
    response = client_for("admin").patch(POLICY, body, format="json")
    assert response.status_code == 400, response.json()
    assert field in [e["field"] for e in response.json()["errors"]]
    assert stored() == before


@pytest.mark.parametrize("token", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_numbers_are_refused_and_the_policy_stays_readable(
    client_for: Callable[[str], APIClient], db: None, token: str
) -> None:
    monitored_model()
    raw = '{"tolerance": ' + token + ', "drift_share": 0.4}'
    response = client_for("admin").generic("PATCH", POLICY, raw, content_type="application/json")
    assert response.status_code == 400
    assert [e["field"] for e in response.json()["errors"]] == ["tolerance"]
    assert stored()["drift_share"] == 0.5, "nothing of the rejected request is stored"
    assert client_for("read").get(POLICY).status_code == 200


def test_a_valid_patch_with_resolve_after_is_stored(client_for: Callable[[str], APIClient], db: None) -> None:
    monitored_model()
    response = client_for("admin").patch(POLICY, {"resolve_after": 2, "drift_share": 0.3}, format="json")
    assert response.status_code == 200
    assert (response.json()["resolve_after"], stored()["drift_share"]) == (2, 0.3)


@pytest.mark.django_db
def test_a_regression_model_defaults_to_mae_lower_is_better() -> None:
    policy = policy_for(regressor())
    assert policy.metric == "mae" and policy.higher_is_better is False


def test_a_classification_metric_on_a_regressor_is_a_400(
    client_for: Callable[[str], APIClient], db: None
) -> None:
    policy_ensure(model=regressor())
    response = client_for("admin").patch("/api/v1/models/price/policy", {"metric": "accuracy"}, format="json")
    assert response.status_code == 400 and response.json()["errors"][0]["field"] == "metric"
    assert MonitoringPolicy.objects.get(model__name="price").metric == "mae"


@pytest.mark.django_db(transaction=True)
def test_migration_moves_existing_regression_policies_off_accuracy() -> None:
    migration = importlib.import_module("monitoring.migrations.0005_policy_checks_alerts_labels")
    MonitoringPolicy.objects.create(model=regressor(), metric="accuracy")
    MonitoringPolicy.objects.create(model=regressor("other"), metric="rmse")
    executor = MigrationExecutor(connection)
    apps = executor.loader.project_state(("monitoring", "0005_policy_checks_alerts_labels")).apps
    migration.regression_policies_use_mae(apps, None)
    assert dict(MonitoringPolicy.objects.values_list("model__name", "metric")) == {
        "price": "mae",
        "other": "rmse",
    }


def test_reading_a_policy_never_stores_one(client_for: Callable[[str], APIClient], db: None) -> None:
    regressor()
    response = client_for("read").get("/api/v1/models/price/policy")
    assert response.status_code == 200 and response.json()["metric"] == "mae"
    assert not MonitoringPolicy.objects.filter(model__name="price").exists()


def test_the_largest_accepted_hours_window_still_checks(
    client_for: Callable[[str], APIClient], db: None
) -> None:
    from monitoring.policy import MAX_WINDOW_HOURS

    monitored_model()
    admin = client_for("admin")
    patch = {"window_kind": "hours", "window_size": MAX_WINDOW_HOURS}
    assert admin.patch(POLICY, patch, format="json").status_code == 200
    response = admin.post("/api/v1/models/sea/checks", {}, format="json")
    assert response.status_code in (200, 201), response.json()
