"""A check stores CBPE's estimate of every metric, each paired with the realised value once
labels come, and the policy may decide on any of them (issue 24 defect 2)."""

from datetime import timedelta

import pytest
from django.utils import timezone

from monitoring.checks import check_labels_refresh, quality_check_run
from monitoring.models import MonitoringPolicy, QualityCheck
from monitoring.policy import policy_update
from monitoring.services import labels_ingest, policy_ensure, predictions_ingest
from monitoring.window import scheduled_window
from registry.models import RegisteredModel
from tests.platform.monitoring.test_checks_estimate_logged import register_loan, thresholded_rows
from workers.drift.cbpe import BINARY_METRICS
from workers.drift.result import estimate_read


def run_check(model: RegisteredModel, *, x_mean: float) -> QualityCheck:
    start = timezone.now().replace(minute=0, second=0, microsecond=0) - timedelta(hours=2)
    rows = thresholded_rows(3000, seed=2, x_mean=x_mean)
    samples = [
        {"id": f"s{i}", "timestamp": (start + timedelta(seconds=i)).isoformat(), **r}
        for i, r in enumerate({k: v for k, v in r.items() if k != "label"} for r in rows)
    ]
    predictions_ingest(model=model, body={"samples": samples})
    labels_ingest(
        model=model, body={"labels": [{"id": f"s{i}", "label": r["label"]} for i, r in enumerate(rows)]}
    )
    window = scheduled_window(MonitoringPolicy.objects.get(model=model), start + timedelta(hours=1))
    ran = quality_check_run(model_id=model.pk, window=window)
    assert ran is not None
    return QualityCheck.objects.get(pk=ran.pk)


def loan_with_metric(metric: str) -> RegisteredModel:
    model = register_loan()
    policy = policy_ensure(model=model)
    policy_update(policy=policy, changes={"metric": metric})
    MonitoringPolicy.objects.filter(pk=policy.pk).update(
        window_kind="samples", window_size=3000, min_samples=200, min_labels=200, cooldown_minutes=0
    )
    return model


@pytest.mark.django_db
def test_a_check_stores_every_cbpe_metric_paired_with_its_realised_value() -> None:
    check = run_check(loan_with_metric("accuracy"), x_mean=0.3)
    stored = estimate_read(check.estimated)
    assert set(stored.metrics) == set(BINARY_METRICS)
    for name, estimate in stored.metrics.items():
        assert estimate.realised == pytest.approx(check.metrics[name]), name
        assert estimate.error == pytest.approx(estimate.value - check.metrics[name]), name
        assert estimate.ci is not None and estimate.ci[0] <= estimate.value <= estimate.ci[1], name
        assert abs(estimate.error) < 0.03, (name, estimate.error)
    # The top level stays the policy metric's estimate, as checks stored it before.
    assert check.estimated["metric"] == "accuracy"
    assert check.estimated["value"] == stored.metrics["accuracy"].value


@pytest.mark.django_db
def test_the_policy_can_decide_on_the_estimated_roc_auc() -> None:
    check = run_check(loan_with_metric("roc_auc"), x_mean=0.3)
    assert check.estimated["metric"] == "roc_auc"
    assert check.decisions["metric"] == "roc_auc"
    assert check.decisions["value"] == pytest.approx(check.metrics["roc_auc"])
    assert check.decisions["estimated_accuracy_drop"] is False  # within 0.05 of the reference's AUC


@pytest.mark.django_db
def test_a_classifier_policy_accepts_every_estimated_metric() -> None:
    model = register_loan()
    policy = policy_ensure(model=model)
    for metric in BINARY_METRICS:
        assert policy_update(policy=policy, changes={"metric": metric}).metric == metric


@pytest.mark.django_db
def test_labels_that_come_after_the_check_pair_every_estimate_with_its_realised_value() -> None:
    model = loan_with_metric("f1")
    start = timezone.now().replace(minute=0, second=0, microsecond=0) - timedelta(hours=2)
    rows = thresholded_rows(3000, seed=4, x_mean=0.2)
    samples = [
        {"id": f"s{i}", "timestamp": (start + timedelta(seconds=i)).isoformat(), **r}
        for i, r in enumerate({k: v for k, v in r.items() if k != "label"} for r in rows)
    ]
    predictions_ingest(model=model, body={"samples": samples})
    window = scheduled_window(MonitoringPolicy.objects.get(model=model), start + timedelta(hours=1))
    ran = quality_check_run(model_id=model.pk, window=window)
    assert ran is not None
    before = estimate_read(QualityCheck.objects.get(pk=ran.pk).estimated)
    assert before.metric == "f1" and all(e.realised is None for e in before.metrics.values())

    labels_ingest(
        model=model, body={"labels": [{"id": f"s{i}", "label": r["label"]} for i, r in enumerate(rows)]}
    )
    assert check_labels_refresh(check=QualityCheck.objects.get(pk=ran.pk))
    check = QualityCheck.objects.get(pk=ran.pk)
    after = estimate_read(check.estimated)
    for name in BINARY_METRICS:
        assert after.metrics[name].value == before.metrics[name].value  # the estimate stays as made
        assert after.metrics[name].realised == pytest.approx(check.metrics[name]), name
    assert after.realised == pytest.approx(check.metrics["f1"])
