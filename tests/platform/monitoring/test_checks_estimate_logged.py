"""A classification check estimates the accuracy of the predictions it logged (CBPE)."""

from datetime import timedelta
from typing import Any

import numpy as np
import pytest
from django.utils import timezone

from monitoring.checks import quality_check_run
from monitoring.models import MonitoringPolicy, QualityCheck
from monitoring.reference import _load, reference_state
from monitoring.services import labels_ingest, policy_ensure, predictions_ingest
from monitoring.window import scheduled_window
from registry.models import ReferenceDataset, RegisteredModel
from registry.services import model_register, reference_upload
from workers.drift.estimation import estimate_accuracy

THRESHOLD = 0.8  # the model predicts 1 only when p(1) >= 0.8, far from the argmax


def thresholded_rows(n: int, *, seed: int, x_mean: float) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    x = rng.normal(x_mean, 1, n)
    p1 = 1 / (1 + np.exp(-3 * x))
    labels = (rng.random(n) < 1 / (1 + np.exp(-2 * x))).astype(int)
    return [
        {
            "features": {"x": float(x[i])},
            "prediction": int(p1[i] >= THRESHOLD),
            "probabilities": {"0": float(1 - p1[i]), "1": float(p1[i])},
            "label": int(labels[i]),
        }
        for i in range(n)
    ]


def register_loan() -> RegisteredModel:
    model = model_register(
        data={
            "name": "loan",
            "task": "classification",
            "features": [{"name": "x", "type": "numerical"}],
            "classes": [0, 1],
        }
    )
    reference_upload(model=model, rows=thresholded_rows(6000, seed=1, x_mean=0.0))
    return model


@pytest.mark.django_db
def test_a_calibration_stored_before_logged_predictions_counted_is_refitted_with_its_threshold() -> None:
    model = register_loan()
    assert reference_state(model=model) is not None  # prepares and stores the calibration
    argmax_era = {"edges": [0.6, 0.8], "accuracy": [0.6, 0.7, 0.9], "counts": [2000.0, 2000.0, 2000.0]}
    ReferenceDataset.objects.filter(model=model).update(calibrator=argmax_era)
    _load.cache_clear()
    state = reference_state(model=model)
    assert state is not None and state.calibrator is not None
    assert state.calibrator.threshold == pytest.approx(THRESHOLD, abs=0.01)


@pytest.mark.django_db
def test_a_check_estimates_the_accuracy_of_the_logged_predictions_not_of_the_argmax() -> None:
    model = register_loan()
    policy = policy_ensure(model=model)
    MonitoringPolicy.objects.filter(pk=policy.pk).update(
        window_kind="samples", window_size=3000, min_samples=200, min_labels=200, cooldown_minutes=0
    )
    start = timezone.now().replace(minute=0, second=0, microsecond=0) - timedelta(hours=2)
    rows = thresholded_rows(3000, seed=2, x_mean=0.3)
    for row in rows[::10]:  # overridden by hand: only the logged value says what was predicted
        row["prediction"] = 1 - row["prediction"]
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
    check = QualityCheck.objects.get(pk=ran.pk)

    state = reference_state(model=model)
    assert state is not None and state.calibrator is not None
    proba = np.array([[r["probabilities"]["0"], r["probabilities"]["1"]] for r in rows])
    logged = np.array([r["prediction"] for r in rows])
    expected, _, _ = estimate_accuracy(state.calibrator, proba, logged)
    argmax, _, _ = estimate_accuracy(state.calibrator, proba, proba.argmax(axis=1))
    by_rule, _, _ = estimate_accuracy(state.calibrator, proba)
    assert check.estimated["value"] == pytest.approx(expected)
    assert argmax - expected > 0.02  # the argmax model is a different, better one
    assert by_rule - expected > 0.02  # so is the reference's rule without the overrides
    assert check.metrics["accuracy"] == pytest.approx(np.mean(logged == [r["label"] for r in rows]))
    low, high = check.estimated["ci"]
    assert low <= check.metrics["accuracy"] <= high
