import json
import re
import time
from datetime import timedelta
from typing import Any

import numpy as np
import pytest
from django.core.files.storage import default_storage
from django.db import connection

from monitoring.checks import quality_check_run
from monitoring.models import MonitoringPolicy, QualityCheck
from monitoring.reports import check_report_render, check_report_request
from monitoring.services import labels_ingest, predictions_ingest
from monitoring.window import scheduled_window
from registry.models import ReferenceDataset
from registry.services import model_register, reference_upload
from tests.clock import T0
from tests.platform.monitoring.factories import monitored_model, rows, send


def make_check() -> QualityCheck:
    model = monitored_model(reference_rows=300)
    send(model, rows(300, seed=2, shift=1.0), start=T0, prefix="a")
    policy = MonitoringPolicy.objects.get(model=model)
    check = quality_check_run(model_id=model.pk, window=scheduled_window(policy, T0 + timedelta(hours=1)))
    assert check is not None
    return check


def test_requested_report_is_rendered_by_a_worker_with_evidently(celery_worker: object) -> None:
    check = make_check()
    check_report_request(check=check)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        connection.close()
        check = QualityCheck.objects.get(pk=check.pk)
        if check.report:
            break
        time.sleep(0.5)
    html = check.report.open("rb").read().decode()
    assert html.lstrip().lower().startswith("<!doctype html>") and len(html) > 10_000
    for column in ("x1", "x2", "segment"):
        assert column in html


def test_rendering_twice_keeps_the_first_report(transactional_db: None) -> None:
    check = make_check()
    first = check_report_render(check_id=check.pk)
    assert check_report_render(check_id=check.pk) == first


def report_counters(html: str) -> dict[str, str]:
    """Every counter in the report's embedded evidently data: label → value."""
    match = re.search(r"var metric_\w+ = (\{.*?\});\n", html, re.S)
    assert match is not None, "the report embeds no evidently data"
    found: dict[str, str] = {}

    def walk(widget: dict[str, Any]) -> None:
        for counter in (widget.get("params") or {}).get("counters") or []:
            found.setdefault(counter["label"], counter["value"])  # the first: current before reference
            if widget.get("title"):
                found[f"{widget['title']} / {counter['label']}"] = counter["value"]
        for child in widget.get("widgets") or []:
            walk(child)

    for widget in json.loads(match.group(1))["widgets"]:
        walk(widget)
    return found


def rendered(check: QualityCheck) -> str:
    name = check_report_render(check_id=check.pk)
    assert name is not None, QualityCheck.objects.get(pk=check.pk).report_error
    with default_storage.open(name, "rb") as handle:
        return str(handle.read().decode())


@pytest.mark.django_db
def test_the_report_counts_only_the_features_as_drifted_as_the_check_does() -> None:
    check = QualityCheck.objects.get(pk=make_check().pk)
    counters = report_counters(rendered(check))
    assert counters["Columns"] == "3"  # x1, x2, segment: not the prediction, label or probabilities
    assert check.drift["number_of_drifted_columns"] >= 1
    assert counters["Drifted Columns"] == str(check.drift["number_of_drifted_columns"])
    prediction = next(
        label for value, label in ((v, k) for k, v in counters.items()) if "column 'prediction'" in value
    )
    assert ("not detected" not in prediction) is check.prediction_drift["drifted"]


@pytest.mark.django_db
def test_the_report_has_the_classification_quality_the_check_measured() -> None:
    check = QualityCheck.objects.get(pk=make_check().pk)
    html = rendered(check)
    counters = report_counters(html)
    assert "Classification quality on the 300 labelled of 300 predictions (and on the reference)" in counters
    assert float(counters["Current: Model Quality Metrics / Accuracy"]) == pytest.approx(
        check.metrics["accuracy"], abs=5e-4
    )
    baseline = ReferenceDataset.objects.get(model=check.model, is_active=True).baseline_metrics
    assert float(counters["Reference: Model Quality Metrics / Accuracy"]) == pytest.approx(
        baseline["accuracy"], abs=5e-4
    )
    for label in ("Precision", "Recall", "F1", "Confusion Matrix", "ROC Curve"):
        assert label in counters, label


@pytest.mark.django_db
def test_a_window_without_labels_says_there_is_no_quality_section() -> None:
    model = monitored_model(reference_rows=300)
    send(model, rows(300, seed=2), start=T0, prefix="a", labelled=False)
    policy = MonitoringPolicy.objects.get(model=model)
    check = quality_check_run(model_id=model.pk, window=scheduled_window(policy, T0 + timedelta(hours=1)))
    assert check is not None
    counters = report_counters(rendered(check))
    assert "No classification quality: none of the 300 predictions has its label yet" in counters
    assert "Accuracy" not in counters and counters["Columns"] == "3"


@pytest.mark.django_db
def test_a_regression_report_has_the_regression_quality_the_check_measured() -> None:
    model = model_register(
        data={
            "name": "price",
            "task": "regression",
            "features": [{"name": "area", "type": "numerical"}, {"name": "rooms", "type": "numerical"}],
        }
    )
    rng = np.random.default_rng(3)

    def regression_rows(n: int, shift: float) -> list[dict[str, Any]]:
        area, rooms = rng.normal(50 + shift, 10, n), rng.integers(1, 6, n).astype(float)
        truth = 3 * area + 10 * rooms
        predicted = truth + rng.normal(0, 5, n)
        return [
            {
                "features": {"area": float(a), "rooms": float(r)},
                "label": float(t),
                "prediction": float(p),
            }
            for a, r, t, p in zip(area, rooms, truth, predicted, strict=True)
        ]

    reference_upload(model=model, rows=regression_rows(300, 0.0))
    MonitoringPolicy.objects.update_or_create(
        model=model,
        defaults={
            "window_kind": "samples",
            "window_size": 1000,
            "min_samples": 100,
            "min_labels": 100,
            "metric": "mae",
        },
    )
    window = regression_rows(200, 20.0)
    samples = [
        {
            "id": f"r{i}",
            "timestamp": (T0 + timedelta(seconds=i)).isoformat(),
            **{k: r[k] for k in ("features", "prediction")},
        }
        for i, r in enumerate(window)
    ]
    predictions_ingest(model=model, body={"samples": samples})
    labels_ingest(
        model=model, body={"labels": [{"id": f"r{i}", "label": r["label"]} for i, r in enumerate(window)]}
    )
    policy = MonitoringPolicy.objects.get(model=model)
    check = quality_check_run(model_id=model.pk, window=scheduled_window(policy, T0 + timedelta(hours=1)))
    assert check is not None
    check = QualityCheck.objects.get(pk=check.pk)
    counters = report_counters(rendered(check))
    assert "Regression quality on the 200 labelled of 200 predictions (and on the reference)" in counters
    assert counters["Columns"] == "2" and counters["Drifted Columns"] == str(
        check.drift["number_of_drifted_columns"]
    )
    mae = next(v for k, v in counters.items() if k.startswith("MAE") or k == "Mean Absolute Error")
    assert float(mae.split()[0]) == pytest.approx(check.metrics["mae"], rel=1e-3)
