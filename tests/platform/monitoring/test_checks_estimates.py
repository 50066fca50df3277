"""The regression estimate (DLE) and multivariate drift inside a real check."""

from datetime import timedelta
from typing import Any

import numpy as np
import pytest

from monitoring.checks import quality_check_run
from monitoring.models import Alert, MonitoringPolicy, QualityCheck
from monitoring.services import labels_ingest, policy_ensure, predictions_ingest
from monitoring.window import scheduled_window
from registry.models import RegisteredModel
from registry.services import model_register, reference_upload
from tests.clock import T0


def regression_rows(n: int, *, seed: int, x_mean: float) -> list[dict[str, Any]]:
    """Exact for x < 0, increasingly wrong for x > 0: a covariate shift raises the MAE."""
    rng = np.random.default_rng(seed)
    x, z = rng.normal(x_mean, 1, n), rng.normal(0, 1, n)
    truth = 2 * x + z
    prediction = truth + rng.normal(0, 0.1 + np.clip(x, 0, None), n)
    return [
        {
            "features": {"x": float(x[i]), "z": float(z[i])},
            "prediction": float(prediction[i]),
            "label": float(truth[i]),
        }
        for i in range(n)
    ]


def correlated_rows(n: int, *, seed: int, correlation: float) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    a = rng.normal(0, 1, n)
    b = correlation * a + np.sqrt(1 - correlation**2) * rng.normal(0, 1, n)
    c = rng.normal(0, 1, n)
    return [
        {
            "features": {"a": float(a[i]), "b": float(b[i]), "c": float(c[i])},
            "prediction": int(a[i] > 0),
            "probabilities": {"0": 0.2 if a[i] > 0 else 0.8, "1": 0.8 if a[i] > 0 else 0.2},
            "label": int(a[i] + 0.3 * c[i] > 0),
        }
        for i in range(n)
    ]


def register(name: str, task: str, features: list[str], reference: list[dict[str, Any]]) -> RegisteredModel:
    data: dict[str, Any] = {
        "name": name,
        "task": task,
        "features": [{"name": f, "type": "numerical"} for f in features],
    }
    if task == "classification":
        data["classes"] = [0, 1]
    model = model_register(data=data)
    reference_upload(model=model, rows=reference)
    policy = policy_ensure(model=model)
    MonitoringPolicy.objects.filter(pk=policy.pk).update(
        window_kind="samples", window_size=2000, min_samples=200, min_labels=200, cooldown_minutes=0
    )
    return model


def post(model: RegisteredModel, data: list[dict[str, Any]]) -> QualityCheck:
    samples = [
        {
            "id": f"s{i}",
            "timestamp": (T0 + timedelta(seconds=i)).isoformat(),
            **{k: v for k, v in r.items() if k != "label"},
        }
        for i, r in enumerate(data)
    ]
    predictions_ingest(model=model, body={"samples": samples})
    labels_ingest(
        model=model, body={"labels": [{"id": f"s{i}", "label": r["label"]} for i, r in enumerate(data)]}
    )
    window = scheduled_window(MonitoringPolicy.objects.get(model=model), T0 + timedelta(hours=1))
    ran = quality_check_run(model_id=model.pk, window=window)
    assert ran is not None
    return QualityCheck.objects.get(pk=ran.pk)


@pytest.mark.django_db
def test_a_regression_check_estimates_mae_without_labels_and_pairs_it_with_the_realised_mae() -> None:
    model = register("price", "regression", ["x", "z"], regression_rows(4000, seed=1, x_mean=0.0))
    check = post(model, regression_rows(2000, seed=2, x_mean=1.0))
    estimated = check.estimated
    assert estimated["metric"] == "mae" and estimated["method"].startswith("DLE")
    assert estimated["realised"] == check.metrics["mae"]
    assert abs(estimated["error"]) < 0.1 * check.metrics["mae"]
    assert check.decisions["metric"] == "mae" and check.decisions["estimated_accuracy_drop"] is True


@pytest.mark.django_db
def test_a_flipped_correlation_raises_multivariate_drift_and_no_univariate_drift() -> None:
    model = register(
        "pairs", "classification", ["a", "b", "c"], correlated_rows(4000, seed=1, correlation=0.9)
    )
    check = post(model, correlated_rows(1000, seed=2, correlation=-0.9))
    assert not any(c["drifted"] for c in check.drift["columns"].values())
    assert check.decisions["data_drift"] is False and check.decisions["multivariate_drift"] is True
    assert check.drift["multivariate"]["score"] > check.drift["multivariate"]["threshold"]
    assert Alert.objects.filter(model=model, kind="multivariate_drift", state="open").count() == 1
