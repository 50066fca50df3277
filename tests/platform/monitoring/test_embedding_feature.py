"""An embedding feature end to end: registered with its dim, each malformed vector refused naming
row and field with nothing stored, a CSV reference in name[i] columns, a check storing the
column with evidently's default test or the policy's calibrated one, and the heat map's row."""

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import numpy as np
import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from monitoring.models import MonitoringPolicy, PredictionSample, QualityCheck
from monitoring.reference import reference_state
from registry.models import ReferenceDataset, RegisteredModel

NAME = "vectors"
DIM = 4
MODEL = {
    "name": NAME,
    "task": "classification",
    "classes": [0, 1],
    "features": [{"name": "emb", "type": "embedding", "dim": DIM}, {"name": "x", "type": "numerical"}],
}
REFUSED = (
    "required: an embedding value (missing values are refused; "
    'register the feature with "missing": "allow" to accept them)'
)


def _hour() -> datetime:
    return timezone.now().replace(minute=0, second=0, microsecond=0)


def _vectors(n: int, *, seed: int, shift: float = 0.0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, DIM)) + shift


def _rows(n: int, *, seed: int, shift: float = 0.0) -> list[dict[str, Any]]:
    vectors, x = _vectors(n, seed=seed, shift=shift), np.random.default_rng(seed + 1).normal(size=n)
    return [
        {"features": {"emb": vectors[i].tolist(), "x": float(x[i])}, "prediction": int(x[i] > 0), "label": 0}
        for i in range(n)
    ]


def _samples(rows: list[dict[str, Any]], start: datetime, prefix: str) -> list[dict[str, Any]]:
    return [
        {
            "id": f"{prefix}{i}",
            "timestamp": (start + timedelta(seconds=i)).isoformat(),
            "features": r["features"],
            "prediction": r["prediction"],
        }
        for i, r in enumerate(rows)
    ]


def _registered(api: APIClient, *, method: str | None = None) -> RegisteredModel:
    assert api.post("/api/v1/models", MODEL, format="json").status_code == 201
    response = api.post(f"/api/v1/models/{NAME}/reference", {"rows": _rows(400, seed=1)}, format="json")
    assert response.status_code == 201, response.json()
    model = RegisteredModel.objects.get(name=NAME)
    policy = {"min_samples": 100, "min_labels": 100} | ({"embedding_drift_method": method} if method else {})
    MonitoringPolicy.objects.update_or_create(model=model, defaults=policy)
    return model


def _checked(api: APIClient, *, shift: float) -> QualityCheck:
    start = _hour() - timedelta(hours=1)
    samples = _samples(_rows(300, seed=2, shift=shift), start, "w")
    assert (
        api.post(f"/api/v1/models/{NAME}/predictions", {"samples": samples}, format="json").status_code == 200
    )
    window = {"start": start.isoformat(), "end": (start + timedelta(hours=1)).isoformat()}
    response = api.post(f"/api/v1/models/{NAME}/checks", window, format="json")
    assert response.status_code in (200, 201), response.json()
    return QualityCheck.objects.get(pk=response.json()["id"])


@pytest.mark.parametrize(
    ("spec", "field", "message"),
    [
        ({"name": "emb", "type": "embedding"}, "features.dim", "required: an integer from 1 to 4096"),
        (
            {"name": "emb", "type": "embedding", "dim": 0},
            "features.dim",
            "required: an integer from 1 to 4096",
        ),
        (
            {"name": "emb", "type": "embedding", "dim": 5000},
            "features.dim",
            "required: an integer from 1 to 4096",
        ),
        (
            {"name": "emb", "type": "embedding", "dim": "4"},
            "features.dim",
            "required: an integer from 1 to 4096",
        ),
        (
            {"name": "emb", "type": "numerical", "dim": 4},
            "features.dim",
            "unknown field for a numerical feature",
        ),
    ],
)
def test_a_bad_dim_or_a_dim_on_another_type_is_refused_at_registration(
    client_for: Callable[[str], APIClient], spec: dict[str, Any], field: str, message: str
) -> None:
    body = MODEL | {"features": [spec]}
    response = client_for("ingest").post("/api/v1/models", body, format="json")
    assert response.status_code == 400
    assert response.json()["errors"] == [{"row": 0, "field": field, "message": message}]
    assert not RegisteredModel.objects.filter(name=NAME).exists()


@pytest.mark.django_db
def test_the_dim_is_kept_in_the_model_schema(client_for: Callable[[str], APIClient]) -> None:
    api = client_for("ingest")
    assert api.post("/api/v1/models", MODEL, format="json").status_code == 201
    assert RegisteredModel.objects.get(name=NAME).features[0] == {
        "name": "emb",
        "type": "embedding",
        "dim": DIM,
    }


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ([1.0, 2.0, 3.0], "expected 4 numbers, got 3"),
        ([1.0, 2.0, 3.0, 4.0, 5.0], "expected 4 numbers, got 5"),
        ([1.0, "x", 3.0, 4.0], "element 1 is str, not a number"),
        ([1.0, 2.0, None, 4.0], "element 2 is NoneType, not a number"),
        ("1,2,3,4", "embedding feature got str (send a list of numbers)"),
        (None, REFUSED),
    ],
)
@pytest.mark.django_db
def test_a_malformed_vector_is_refused_naming_row_and_field_and_nothing_is_stored(
    client_for: Callable[[str], APIClient], value: Any, message: str
) -> None:
    api = client_for("ingest")
    _registered(api)
    samples = _samples(_rows(3, seed=3), _hour(), "bad")
    samples[2]["features"]["emb"] = value
    response = api.post(f"/api/v1/models/{NAME}/predictions", {"samples": samples}, format="json")
    assert response.status_code == 400
    assert response.json()["errors"] == [{"row": 2, "field": "features.emb", "message": message}]
    assert not PredictionSample.objects.filter(model__name=NAME).exists()


@pytest.mark.django_db
def test_non_finite_elements_are_refused_in_a_csv_reference(client_for: Callable[[str], APIClient]) -> None:
    """JSON has no NaN, so the non-finite case is a CSV cell (a split column or a JSON list)."""
    api = client_for("ingest")
    assert api.post("/api/v1/models", MODEL, format="json").status_code == 201
    header = ",".join([f"emb[{i}]" for i in range(DIM)] + ["x", "label"])
    text = f"{header}\n1,2,3,4,0.5,0\n1,nan,3,4,0.5,1\n"
    response = api.post(f"/api/v1/models/{NAME}/reference", text, content_type="text/csv")
    assert response.status_code == 400
    assert response.json()["errors"] == [
        {
            "row": 1,
            "field": "features.emb",
            "message": "element 1 is not finite (NaN and infinity are rejected)",
        }
    ]
    assert not ReferenceDataset.objects.filter(model__name=NAME).exists()


@pytest.mark.django_db
def test_a_csv_reference_in_split_columns_is_stored_as_float32_vectors(
    client_for: Callable[[str], APIClient],
) -> None:
    api = client_for("ingest")
    assert api.post("/api/v1/models", MODEL, format="json").status_code == 201
    vectors = _vectors(60, seed=4)
    header = ",".join([f"emb[{i}]" for i in range(DIM)] + ["x", "label"])
    lines = [",".join(map(repr, v.tolist())) + f",{i * 0.1},{i % 2}" for i, v in enumerate(vectors)]
    response = api.post(
        f"/api/v1/models/{NAME}/reference", "\n".join([header, *lines]), content_type="text/csv"
    )
    assert response.status_code == 201, response.json()
    state = reference_state(model=RegisteredModel.objects.get(name=NAME))
    assert state is not None
    summary = state.summary.column("emb")
    assert summary.n == 60 and summary.vectors.dtype == np.float32
    assert np.array_equal(summary.vectors, vectors.astype("float32"))


@pytest.mark.django_db
def test_a_csv_reference_with_one_list_column_is_accepted(client_for: Callable[[str], APIClient]) -> None:
    api = client_for("ingest")
    assert api.post("/api/v1/models", MODEL, format="json").status_code == 201
    text = 'emb,x,label\n"[1, 2, 3, 4]",0.5,0\n"[4, 3, 2, 1]",0.1,1\n'
    response = api.post(f"/api/v1/models/{NAME}/reference", text, content_type="text/csv")
    assert response.status_code == 201, response.json()
    state = reference_state(model=RegisteredModel.objects.get(name=NAME))
    assert state is not None and state.summary.column("emb").vectors.tolist() == [[1, 2, 3, 4], [4, 3, 2, 1]]


@pytest.mark.django_db
def test_a_check_stores_the_embeddings_drift_by_evidentlys_default_test(
    client_for: Callable[[str], APIClient],
) -> None:
    api = client_for("ingest")
    _registered(api)
    column = _checked(api, shift=0.5).drift["columns"]["emb"]
    assert set(column) == set(_checked_shape())
    assert (column["column_type"], column["method"], column["drifted"]) == ("embedding", "model", True)
    assert column["higher_is_drift"] is True and column["score"] > column["threshold"]
    assert column["n_reference"] == 400 and column["n_current"] == 300


def _checked_shape() -> dict[str, Any]:
    from workers.drift.engine import ColumnDrift

    return ColumnDrift("numerical", "ks", "K-S p_value", 0.5, 0.05, False, 1, 1).to_dict()  # type: ignore[return-value]


@pytest.mark.django_db
@pytest.mark.parametrize("method", ["mean_perm", "classifier_mw"])
def test_the_policy_picks_a_calibrated_method_for_embeddings(
    client_for: Callable[[str], APIClient], method: str
) -> None:
    api = client_for("ingest")
    _registered(api, method=method)
    drift = _checked(api, shift=0.0).drift["columns"]
    assert (drift["emb"]["method"], drift["emb"]["threshold"], drift["emb"]["higher_is_drift"]) == (
        method,
        0.05,
        False,
    )
    assert drift["x"]["method"] == "ks"


@pytest.mark.django_db
def test_an_unknown_embedding_method_is_refused_by_the_policy_api(
    client_for: Callable[[str], APIClient],
) -> None:
    api = client_for("ingest")
    model = _registered(api)
    admin = client_for("admin")
    response = admin.patch(f"/api/v1/models/{NAME}/policy", {"embedding_drift_method": "mmd"}, format="json")
    assert response.status_code == 400
    assert response.json()["errors"] == [
        {
            "row": None,
            "field": "embedding_drift_method",
            "message": "must be one of model, classifier_mw, mean_perm",
        }
    ]
    assert MonitoringPolicy.objects.get(model=model).embedding_drift_method == "model"


@pytest.mark.django_db
def test_the_heat_map_has_a_row_for_the_embedding_and_its_drill_down_a_scatter(
    client_for: Callable[[str], APIClient],
) -> None:
    api = client_for("ingest")
    _registered(api)
    check = _checked(api, shift=0.5)
    client = Client()
    client.force_login(User.objects.create_user("ops", password="pw-ops-12345", is_staff=True))
    page = client.get(f"/models/{NAME}/").content.decode()
    assert f"/models/{NAME}/drift/?feature=emb&amp;range=" in page and "domain classifier ROC AUC" in page
    drill = client.get(f"/models/{NAME}/drift/?feature=emb&range=all&check={check.pk}")
    assert drill.status_code == 200
    html = drill.content.decode()
    assert "projection on the reference&#x27;s first principal component" in html
    # the scatter on the first two components: 300 of the 400 reference rows, the window's 300
    assert html.count('<circle class="dot-ref"') == 300 and html.count('<circle class="dot-cur"') == 300
