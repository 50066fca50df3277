"""Issue 24 §4: labels that arrive after a window was checked decide its realised breach and feed
the k-of-n series, so the alert opens and resolves as checks run with those labels would have."""

import pytest
from django.db.models import QuerySet

from monitoring.checks import checks_labels_refresh, quality_check_run
from monitoring.models import Alert, AlertState, MonitoringPolicy, QualityCheck
from monitoring.services import labels_ingest
from monitoring.window import scheduled_window
from registry.models import RegisteredModel
from tests.clock import T0, at
from tests.platform.monitoring.factories import monitored_model, rows, send

WINDOW = 500


def model_k_of_n(**policy: object) -> RegisteredModel:
    defaults: dict[str, object] = {
        "window_size": WINDOW,
        "threshold_rule": "absolute",
        "tolerance": 0.1,
        "alert_k": 2,
        "alert_n": 2,
        "resolve_after": 1,
        "sequential_detector": False,
    }
    return monitored_model(**{**defaults, **policy})  # type: ignore[arg-type]


def drops() -> "QuerySet[Alert]":
    """The realised breach's alerts (the estimate, from the confidences, has its own kind)."""
    return Alert.objects.filter(kind="accuracy_drop")


def unlabelled_check(model: RegisteredModel, hour: int, *, flip: float) -> tuple[QualityCheck, list]:
    """One window of traffic checked before any of its labels came."""
    data = rows(WINDOW, seed=100 + hour, flip=flip)
    send(model, data, start=at(hours=hour), prefix=f"h{hour}-", labelled=False)
    window = scheduled_window(MonitoringPolicy.objects.get(model=model), at(hours=hour + 1))
    ran = quality_check_run(model_id=model.pk, window=window)
    assert ran is not None and ran.decisions["accuracy_drop"] is None, "no labels: undecided"
    return ran, data


def label(model: RegisteredModel, hour: int, data: list) -> None:
    body = {"labels": [{"id": f"h{hour}-{i}", "label": r["label"]} for i, r in enumerate(data)]}
    labels_ingest(model=model, body=body)


def refresh() -> int:
    return checks_labels_refresh(now=at(hours=6))


@pytest.mark.django_db
def test_late_labels_decide_the_breach_and_open_the_alert_when_k_of_n_refreshed_checks_breach() -> None:
    model = model_k_of_n()
    first, first_data = unlabelled_check(model, 0, flip=0.45)
    second, second_data = unlabelled_check(model, 1, flip=0.45)
    assert not drops().exists()
    label(model, 0, first_data)
    assert refresh() == 1
    first.refresh_from_db()
    assert first.decisions["value"] == first.metrics["accuracy"] < 0.65
    assert first.decisions["accuracy_drop"] is True
    assert not drops().exists(), "1 of the last 2 checks breached: k is 2"
    label(model, 1, second_data)
    assert refresh() == 1
    alert = Alert.objects.get(model=model, kind="accuracy_drop")
    assert alert.state == AlertState.OPEN and alert.opened_by_id == second.pk
    assert alert.details["decisions"]["value"] < 0.65


@pytest.mark.django_db
def test_late_labels_that_clear_a_window_resolve_the_alert() -> None:
    model = model_k_of_n(alert_k=1, alert_n=1)
    bad, bad_data = unlabelled_check(model, 0, flip=0.45)
    label(model, 0, bad_data)
    refresh()
    alert = Alert.objects.get(model=model, kind="accuracy_drop", state=AlertState.OPEN)
    good, good_data = unlabelled_check(model, 1, flip=0.05)
    assert Alert.objects.get(pk=alert.pk).state == AlertState.OPEN, "undecided is not clear"
    label(model, 1, good_data)
    assert refresh() == 1
    alert.refresh_from_db()
    assert alert.state == AlertState.RESOLVED and alert.resolved_by_check_id == good.pk
    good.refresh_from_db()
    assert good.decisions["accuracy_drop"] is False and bad.pk != good.pk


@pytest.mark.django_db
def test_a_refresh_of_an_older_check_keeps_the_alert_telling_the_newer_one() -> None:
    model = model_k_of_n(alert_k=1, alert_n=1, resolve_after=3)
    old, old_data = unlabelled_check(model, 0, flip=0.45)
    newer, newer_data = unlabelled_check(model, 1, flip=0.45)
    label(model, 1, newer_data)
    refresh()
    alert = Alert.objects.get(model=model, kind="accuracy_drop")
    assert alert.opened_by_id == newer.pk
    label(model, 0, old_data)
    assert refresh() == 1
    alert.refresh_from_db()
    assert alert.last_check_id == newer.pk and drops().count() == 1
    assert QualityCheck.objects.get(pk=old.pk).decisions["accuracy_drop"] is True


@pytest.mark.django_db
def test_a_check_already_decided_by_its_labels_is_not_refreshed_again() -> None:
    model = model_k_of_n(alert_k=1, alert_n=1)
    send(model, rows(WINDOW, seed=9, flip=0.45), start=T0, prefix="l")
    ran = quality_check_run(
        model_id=model.pk, window=scheduled_window(MonitoringPolicy.objects.get(model=model), at(hours=1))
    )
    assert ran is not None and ran.decisions["accuracy_drop"] is True
    assert drops().count() == 1
    assert refresh() == 0 and drops().count() == 1
