"""Issue 24 §3: thresholds learned from the reference's own variability by default (mean ± 3 sd
of the metric over reference chunks of one window), an absolute or relative tolerance on
request, the band stored on the check and drawn, and the rule named by the API and the page."""

from datetime import timedelta

import numpy as np
import pytest
from django.test import Client

from dashboard.quality_chart import quality_chart
from monitoring.checks import quality_check_run
from monitoring.models import Alert, MonitoringPolicy, QualityCheck
from monitoring.window import range_window, scheduled_window
from tests.clock import T0, at
from tests.platform.monitoring.factories import monitored_model, rows, send

REFERENCE_ROWS = 8000  # 8 windows of 1000
WINDOW = 1000


def chunk_accuracies(n_rows: int, size: int) -> list[float]:
    """Accuracy of each chunk of the reference the factory uploads (rows(n, seed=1, flip=0.1))."""
    data = rows(n_rows, seed=1, flip=0.1)
    right = np.array([r["prediction"] == r["label"] for r in data])
    return [float(right[i : i + size].mean()) for i in range(0, n_rows - size + 1, size)]


def checked(model_name: str, reference_rows: int = REFERENCE_ROWS, **policy: object) -> QualityCheck:
    """A model with a big reference, and one window whose accuracy fell by about 0.04."""
    model = monitored_model(model_name, reference_rows=reference_rows, window_size=WINDOW, **policy)
    send(model, rows(WINDOW, seed=10, flip=0.145), start=T0, prefix="w")
    ran = quality_check_run(
        model_id=model.pk, window=scheduled_window(MonitoringPolicy.objects.get(model=model), at(hours=1))
    )
    assert ran is not None
    return QualityCheck.objects.get(pk=ran.pk)


@pytest.mark.django_db
def test_by_default_a_drop_outside_the_reference_band_alerts_where_the_absolute_tolerance_missed_it() -> None:
    check = checked("band", tolerance=0.05, threshold_rule="reference_band")
    accuracies = chunk_accuracies(REFERENCE_ROWS, WINDOW)
    mean, sd = np.mean(accuracies), np.std(accuracies)
    band = check.decisions["band"]
    assert (band["chunks"], band["chunk_size"], band["sigmas"]) == (8, WINDOW, 3.0)
    assert band["lower"] == pytest.approx(mean - 3 * sd) and band["upper"] == pytest.approx(mean + 3 * sd)
    value = check.decisions["value"]
    assert band["lower"] > value > check.decisions["baseline"] - 0.05, "inside 0.05, outside the band"
    assert check.decisions["accuracy_drop"] is True and check.decisions["rule"] == "reference_band"
    alert = Alert.objects.get(model=check.model, kind="accuracy_drop")
    assert "reference band" in alert.message and f"{band['lower']:.4f}" in alert.message
    absolute = checked("tolerance", tolerance=0.05, threshold_rule="absolute")
    assert absolute.decisions["value"] == value and absolute.decisions["accuracy_drop"] is False
    assert absolute.decisions["rule"] == "absolute" and "band" not in absolute.decisions


@pytest.mark.django_db
def test_a_new_policy_defaults_to_the_reference_band() -> None:
    model = monitored_model("fresh")
    MonitoringPolicy.objects.filter(model=model).delete()
    from monitoring.services import policy_ensure

    policy = policy_ensure(model=model)
    assert (policy.threshold_rule, policy.band_sigmas) == ("reference_band", 3.0)


@pytest.mark.django_db
def test_an_hours_window_learns_its_band_on_chunks_of_its_own_sample_count() -> None:
    model = monitored_model(
        "hourly", reference_rows=4000, window_kind="hours", window_size=1, threshold_rule="reference_band"
    )
    send(model, rows(400, seed=8, flip=0.1), start=T0, prefix="h", step=timedelta(seconds=5))
    ran = quality_check_run(model_id=model.pk, window=range_window(T0, at(hours=1)))
    assert ran is not None
    band = QualityCheck.objects.get(pk=ran.pk).decisions["band"]
    assert (band["chunk_size"], band["chunks"]) == (400, 10)
    accuracies = chunk_accuracies(4000, 400)
    assert band["lower"] == pytest.approx(np.mean(accuracies) - 3 * np.std(accuracies))


@pytest.mark.django_db
def test_a_reference_too_small_for_a_band_falls_back_to_the_absolute_tolerance_and_says_so() -> None:
    check = checked("small", tolerance=0.02, threshold_rule="reference_band", reference_rows=2000)
    assert check.decisions["rule"] == "absolute" and "band" not in check.decisions
    assert "fewer than 4 windows of 1000" in check.decisions["rule_text"]
    assert check.decisions["threshold"] == pytest.approx(check.decisions["baseline"] - 0.02)


@pytest.mark.django_db
def test_a_relative_tolerance_is_a_fraction_of_the_baseline() -> None:
    check = checked("relative", threshold_rule="relative", relative_tolerance=0.02)
    assert check.decisions["rule"] == "relative"
    assert check.decisions["threshold"] == pytest.approx(check.decisions["baseline"] * 0.98)
    assert check.decisions["accuracy_drop"] is True  # about 0.04 of 0.9 is more than 2%


@pytest.mark.django_db
def test_the_api_and_the_page_name_the_rule_and_the_chart_draws_the_band(
    client_for, admin_client: Client
) -> None:  # type: ignore[no-untyped-def]
    check = checked("drawn", threshold_rule="reference_band")
    band = check.decisions["band"]
    alerts = client_for("read").get("/api/v1/models/drawn/alerts").json()
    assert alerts[0]["kind"] == "accuracy_drop" and alerts[0]["rule"].startswith("reference band [")
    checks = client_for("read").get("/api/v1/models/drawn/checks").json()
    assert checks[0]["decisions"]["band"]["lower"] == band["lower"]
    chart = quality_chart(model=check.model, policy=MonitoringPolicy.objects.get(model=check.model))
    assert chart is not None
    drawn = {h["label"] for h in chart["hlines"]}
    assert {"reference band (low)", "reference band (high)", "reference mean"} <= drawn
    page = admin_client.get(f"/checks/{check.pk}/").content.decode()
    assert "reference band [" in page and "8 reference windows of 1000 rows" in page


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("threshold_rule", "nannyml", "must be one of reference_band, absolute, relative"),
        ("relative_tolerance", -0.1, "must be >= 0"),
        ("band_sigmas", 0, "must be in (0, 100]"),
        ("band_sigmas", "3", "must be a number"),
    ],
)
def test_a_bad_threshold_option_is_a_400_naming_it_and_nothing_is_stored(
    client_for, field: str, value: object, message: str
) -> None:  # type: ignore[no-untyped-def]
    monitored_model("strict", threshold_rule="absolute")
    response = client_for("admin").patch("/api/v1/models/strict/policy", {field: value}, format="json")
    assert response.status_code == 400
    errors = response.json()["errors"]
    assert [(e["field"], e["message"]) for e in errors] == [(field, message)]
    assert MonitoringPolicy.objects.get(model__name="strict").threshold_rule == "absolute"


@pytest.mark.django_db
def test_the_migration_keeps_a_chosen_tolerance_absolute_and_moves_the_old_default_to_the_band() -> None:
    from importlib import import_module

    from django.apps import apps

    migration = import_module("monitoring.migrations.0014_thr_threshold_rules_label_known_at")
    monitored_model("chosen", tolerance=0.02, threshold_rule="reference_band")
    monitored_model("default", tolerance=0.05, threshold_rule="reference_band")
    migration.keep_chosen_tolerances(apps, None)
    rules = dict(MonitoringPolicy.objects.values_list("model__name", "threshold_rule"))
    assert rules == {"chosen": "absolute", "default": "reference_band"}
