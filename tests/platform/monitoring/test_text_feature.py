"""A text feature end to end: each bad value refused naming row and field with nothing stored, a
check storing the column (evidently's text-content drift) and its descriptor entries in the
shape of every drift column, and the heat map's sub-rows."""

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import numpy as np
import pytest
from django.contrib.auth.models import User
from django.test import Client
from rest_framework.test import APIClient

from monitoring.models import MonitoringPolicy, PredictionSample, QualityCheck
from registry.models import RegisteredModel
from tests.clock import at, iso
from tests.platform.conftest import stored_features
from workers.drift.engine import ColumnDrift
from workers.features.text import DESCRIPTORS, MAX_TEXT_CHARS

NAME = "reviews"
MODEL = {
    "name": NAME,
    "task": "classification",
    "classes": [0, 1],
    "features": [{"name": "review", "type": "text"}, {"name": "x", "type": "numerical"}],
}
REFUSED = (
    "required: a text value (missing values are refused; "
    'register the feature with "missing": "allow" to accept them)'
)
PRAISE = "good great fine product works love quality fast cheap nice sturdy bright".split()
COMPLAINT = "broken refund terrible late awful missing damaged slow poor worst".split()


def _rows(n: int, *, seed: int, vocabulary: list[str]) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=n)
    return [
        {
            "features": {
                "review": " ".join(rng.choice(vocabulary, int(rng.integers(3, 12)))),
                "x": float(x[i]),
            },
            "prediction": int(x[i] > 0),
            "label": 0,
        }
        for i in range(n)
    ]


def _samples(rows: list[dict[str, Any]], start: datetime, prefix: str) -> list[dict[str, Any]]:
    return [
        {
            "id": f"{prefix}{i}",
            "timestamp": iso(start + timedelta(seconds=i)),
            "features": r["features"],
            "prediction": r["prediction"],
        }
        for i, r in enumerate(rows)
    ]


def _registered(api: APIClient) -> RegisteredModel:
    assert api.post("/api/v1/models", MODEL, format="json").status_code == 201
    rows = _rows(300, seed=1, vocabulary=PRAISE)
    response = api.post(f"/api/v1/models/{NAME}/reference", {"rows": rows}, format="json")
    assert response.status_code == 201, response.json()
    model = RegisteredModel.objects.get(name=NAME)
    MonitoringPolicy.objects.update_or_create(model=model, defaults={"min_samples": 100, "min_labels": 100})
    return model


def _checked(api: APIClient, *, vocabulary: list[str], hour: int = 0) -> QualityCheck:
    start = at(hours=hour)
    samples = _samples(_rows(200, seed=2 + hour, vocabulary=vocabulary), start, f"w{hour}-")
    response = api.post(f"/api/v1/models/{NAME}/predictions", {"samples": samples}, format="json")
    assert response.status_code == 200, response.json()
    window = {"start": iso(start), "end": iso(start + timedelta(hours=1))}
    response = api.post(f"/api/v1/models/{NAME}/checks", window, format="json")
    assert response.status_code in (200, 201), response.json()
    return QualityCheck.objects.get(pk=response.json()["id"])


def _column_shape() -> set[str]:
    return set(ColumnDrift("numerical", "ks", "K-S p_value", 0.5, 0.05, False, 1, 1).to_dict())


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (None, REFUSED),
        (42, "text feature got int (send a string)"),
        (["a", "b"], "text feature got list (send a string)"),
        ({"text": "a"}, "text feature got dict (send a string)"),
        ("x" * (MAX_TEXT_CHARS + 1), f"at most {MAX_TEXT_CHARS} characters, got {MAX_TEXT_CHARS + 1}"),
    ],
)
@pytest.mark.django_db
def test_a_bad_text_is_refused_naming_row_and_field_and_nothing_is_stored(
    client_for: Callable[[str], APIClient], value: Any, message: str
) -> None:
    api = client_for("ingest")
    _registered(api)
    samples = _samples(_rows(3, seed=3, vocabulary=PRAISE), at(), "bad")
    samples[1]["features"]["review"] = value
    response = api.post(f"/api/v1/models/{NAME}/predictions", {"samples": samples}, format="json")
    assert response.status_code == 400
    assert response.json()["errors"] == [{"row": 1, "field": "features.review", "message": message}]
    assert not PredictionSample.objects.filter(model__name=NAME).exists()


@pytest.mark.django_db
def test_a_missing_text_field_is_refused_naming_row_and_field(client_for: Callable[[str], APIClient]) -> None:
    api = client_for("ingest")
    _registered(api)
    samples = _samples(_rows(2, seed=3, vocabulary=PRAISE), at(), "bad")
    del samples[0]["features"]["review"]
    response = api.post(f"/api/v1/models/{NAME}/predictions", {"samples": samples}, format="json")
    assert response.status_code == 400
    assert response.json()["errors"] == [
        {"row": 0, "field": "features.review", "message": "missing feature (send null for a missing value)"}
    ]
    assert not PredictionSample.objects.filter(model__name=NAME).exists()


@pytest.mark.django_db
def test_a_text_at_the_limit_is_stored(client_for: Callable[[str], APIClient]) -> None:
    api = client_for("ingest")
    _registered(api)
    samples = _samples(_rows(1, seed=3, vocabulary=PRAISE), at(), "long")
    samples[0]["features"]["review"] = "é" * MAX_TEXT_CHARS
    response = api.post(f"/api/v1/models/{NAME}/predictions", {"samples": samples}, format="json")
    assert response.status_code == 200, response.json()
    stored = stored_features(RegisteredModel.objects.get(name=NAME))
    assert [s["review"] for s in stored.values()] == ["é" * MAX_TEXT_CHARS]


@pytest.mark.django_db
def test_a_check_stores_the_text_decision_and_its_descriptor_entries(
    client_for: Callable[[str], APIClient],
) -> None:
    api = client_for("ingest")
    _registered(api)
    drift = _checked(api, vocabulary=PRAISE[:6] + COMPLAINT).drift
    column = drift["columns"]["review"]
    assert set(column) == _column_shape()
    assert (column["column_type"], column["method"], column["drifted"]) == (
        "text",
        "perc_text_content_drift",
        True,
    )
    assert column["higher_is_drift"] is True and column["score"] > column["threshold"] > 0.5
    assert (column["n_reference"], column["n_current"]) == (300, 200)
    entries = drift["descriptors"]["review"]
    assert set(entries) == set(DESCRIPTORS)
    assert all(set(e) == _column_shape() for e in entries.values())
    assert entries["oov_share"]["drifted"] and entries["oov_share"]["higher_is_drift"] is False
    assert set(drift["descriptors"]) == {"review"}  # a numerical feature derives none


@pytest.mark.django_db
def test_a_same_source_window_is_not_flagged(client_for: Callable[[str], APIClient]) -> None:
    api = client_for("ingest")
    _registered(api)
    drift = _checked(api, vocabulary=PRAISE).drift
    assert drift["columns"]["review"]["drifted"] is False
    assert not any(e["drifted"] for e in drift["descriptors"]["review"].values())


@pytest.mark.django_db
def test_the_heat_map_shows_the_descriptors_as_the_features_sub_rows(
    client_for: Callable[[str], APIClient],
) -> None:
    api = client_for("ingest")
    _registered(api)
    check = _checked(api, vocabulary=PRAISE[:6] + COMPLAINT)
    client = Client()
    client.force_login(User.objects.create_user("ops", password="pw-ops-12345", is_staff=True))
    page = client.get(f"/models/{NAME}/?range=all").content.decode()
    assert "Percentile text content drift" in page
    for descriptor in DESCRIPTORS:
        assert f'<tr class="sub-row"><th class="feat">review · {descriptor}</th>' in page
    assert page.count(f"?feature=review&amp;range=all&amp;check={check.pk}") == 1 + len(DESCRIPTORS)
    drill = client.get(f"/models/{NAME}/drift/?feature=review&range=all&check={check.pk}")
    assert drill.status_code == 200
    assert "the words whose share of all words changed most" in drill.content.decode()
