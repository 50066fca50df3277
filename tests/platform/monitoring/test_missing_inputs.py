"""Embedding and text features registered with ``"missing": "allow"``: the option validated at
registration, null or absent values stored as missing through either validation path (null rows
in the Arrow parts), malformed values still refused, drift on the present rows (evidently as the oracle) and
the missing share reported in the check's data-quality section and on the model page."""

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from django.contrib.auth.models import User
from django.test import Client
from evidently.legacy.metrics.data_drift.embedding_drift_methods import ModelDriftMethod
from rest_framework.test import APIClient

from monitoring.models import MonitoringPolicy, PredictionSample, QualityCheck, SamplePart
from monitoring.reference import reference_state
from monitoring.samples import WindowBounds, sample_source
from monitoring.store.compaction import parts_compact_due
from monitoring.store.parts import FEATURE, part_read
from registry.models import ReferenceDataset, RegisteredModel
from tests.clock import at, iso
from tests.platform.conftest import row_path_only

NAME = "tickets"
DIM = 4
WORDS = "good great fine product works love quality fast cheap nice sturdy bright".split()
FEATURES = [
    {"name": "emb", "type": "embedding", "dim": DIM, "missing": "allow"},
    {"name": "review", "type": "text", "missing": "allow"},
    {"name": "x", "type": "numerical"},
]
MODEL = {"name": NAME, "task": "classification", "classes": [0, 1], "features": FEATURES}


@pytest.fixture(params=["columns", "rows"])
def store(
    request: pytest.FixtureRequest, settings: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[str]:
    """Requests validated a column at a time, or row by row."""
    settings.MEDIA_ROOT = str(tmp_path)
    if request.param == "rows":
        row_path_only(monkeypatch)
    yield request.param


def _rows(n: int, *, seed: int, shift: float = 0.0) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    vectors, x = rng.normal(size=(n, DIM)) + shift, rng.normal(size=n)
    return [
        {
            "features": {
                "emb": vectors[i].tolist(),
                "review": " ".join(rng.choice(WORDS, int(rng.integers(3, 12)))),
                "x": float(x[i]),
            },
            "prediction": int(x[i] > 0),
            "label": 0,
        }
        for i in range(n)
    ]


def _samples(rows: list[dict[str, Any]], prefix: str = "s") -> list[dict[str, Any]]:
    return [
        {
            "id": f"{prefix}{i}",
            "timestamp": iso(at(seconds=i)),
            "features": dict(r["features"]),
            "prediction": r["prediction"],
        }
        for i, r in enumerate(rows)
    ]


def _registered(api: APIClient, features: list[dict[str, Any]] = FEATURES) -> RegisteredModel:
    response = api.post("/api/v1/models", MODEL | {"features": features}, format="json")
    assert response.status_code == 201, response.json()
    response = api.post(f"/api/v1/models/{NAME}/reference", {"rows": _rows(400, seed=1)}, format="json")
    assert response.status_code == 201, response.json()
    model = RegisteredModel.objects.get(name=NAME)
    MonitoringPolicy.objects.update_or_create(model=model, defaults={"min_samples": 100, "min_labels": 100})
    return model


def _post(api: APIClient, samples: list[dict[str, Any]]) -> Any:
    return api.post(f"/api/v1/models/{NAME}/predictions", {"samples": samples}, format="json")


@pytest.mark.django_db
def test_the_missing_option_is_kept_in_the_model_schema(client_for: Callable[[str], APIClient]) -> None:
    response = client_for("ingest").post("/api/v1/models", MODEL, format="json")
    assert response.status_code == 201
    assert RegisteredModel.objects.get(name=NAME).features == FEATURES
    assert response.json()["features"] == FEATURES
    assert client_for("read").get(f"/api/v1/models/{NAME}").json()["features"] == FEATURES


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"name": "f", "type": "embedding", "dim": DIM, "missing": "yes"}, "must be one of refuse, allow"),
        ({"name": "f", "type": "embedding", "dim": DIM, "missing": True}, "must be one of refuse, allow"),
        ({"name": "f", "type": "text", "missing": None}, "must be one of refuse, allow"),
        ({"name": "f", "type": "text", "missing": "ALLOW"}, "must be one of refuse, allow"),
        ({"name": "f", "type": "numerical", "missing": "allow"}, "unknown field for a numerical feature"),
        ({"name": "f", "type": "categorical", "missing": "allow"}, "unknown field for a categorical feature"),
    ],
)
@pytest.mark.django_db
def test_a_bad_missing_option_is_refused_at_registration(
    client_for: Callable[[str], APIClient], spec: dict[str, Any], message: str
) -> None:
    response = client_for("ingest").post("/api/v1/models", MODEL | {"features": [spec]}, format="json")
    assert response.status_code == 400
    assert response.json()["errors"] == [{"row": 0, "field": "features.missing", "message": message}]
    assert not RegisteredModel.objects.filter(name=NAME).exists()


def _by_id(arrays: dict[str, Any]) -> pd.DataFrame:
    return pd.DataFrame(arrays).set_index("sample_id").sort_index(key=lambda ids: ids.str[1:].astype(int))


@pytest.mark.django_db
def test_null_and_absent_values_are_stored_as_missing_through_either_path(
    client_for: Callable[[str], APIClient], store: str
) -> None:
    api = client_for("ingest")
    model = _registered(api)
    rows = _rows(8, seed=2)
    samples = _samples(rows)
    samples[2]["features"]["emb"] = None
    del samples[5]["features"]["emb"]
    samples[3]["features"]["review"] = None
    del samples[6]["features"]["review"]
    response = _post(api, samples)
    assert response.status_code == 200, response.json()
    assert response.json() == {"accepted": 8, "duplicates": 0}
    loaded = _by_id(sample_source().load(model=model, window=WindowBounds(at(), at(hours=1))).arrays)
    assert [v is None for v in loaded["emb"]] == [i in (2, 5) for i in range(8)]
    assert [v is None for v in loaded["review"]] == [i in (3, 6) for i in range(8)]
    for i in (0, 1, 3, 4, 6, 7):
        expected = np.asarray(rows[i]["features"]["emb"], dtype="float32")
        assert loaded["emb"].iloc[i].dtype == np.float32 and np.array_equal(loaded["emb"].iloc[i], expected)
    assert loaded["review"].iloc[0] == rows[0]["features"]["review"]
    (part,) = SamplePart.objects.filter(model=model)
    table = part_read(part.name)
    assert table.column(FEATURE + "emb").type == pa.list_(pa.float32(), DIM)
    assert (table.column(FEATURE + "emb").null_count, table.column(FEATURE + "review").null_count) == (2, 2)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("emb", [1.0, 2.0, 3.0], "expected 4 numbers, got 3"),
        ("emb", [1.0, "x", 3.0, 4.0], "element 1 is str, not a number"),
        ("emb", [1.0, 2.0, None, 4.0], "element 2 is NoneType, not a number"),
        ("emb", "1,2,3,4", "embedding feature got str (send a list of numbers)"),
        ("review", 42, "text feature got int (send a string)"),
    ],
)
@pytest.mark.django_db
def test_a_malformed_value_is_still_refused_when_missing_is_allowed(
    client_for: Callable[[str], APIClient], store: str, field: str, value: Any, message: str
) -> None:
    api = client_for("ingest")
    model = _registered(api)
    samples = _samples(_rows(3, seed=3))
    samples[0]["features"]["emb"] = None  # an allowed missing value beside the bad one
    samples[2]["features"][field] = value
    response = _post(api, samples)
    assert response.status_code == 400
    assert response.json()["errors"] == [{"row": 2, "field": f"features.{field}", "message": message}]
    assert not PredictionSample.objects.filter(model=model).exists()
    assert not SamplePart.objects.filter(model=model).exists()


@pytest.mark.parametrize(
    ("feature", "refused"),
    [
        (
            "emb",
            "required: an embedding value (missing values are refused; "
            'register the feature with "missing": "allow" to accept them)',
        ),
        (
            "review",
            "required: a text value (missing values are refused; "
            'register the feature with "missing": "allow" to accept them)',
        ),
    ],
)
@pytest.mark.django_db
def test_without_the_option_a_null_or_absent_value_is_still_refused(
    client_for: Callable[[str], APIClient], store: str, feature: str, refused: str
) -> None:
    api = client_for("ingest")
    model = _registered(api, [{k: v for k, v in f.items() if k != "missing"} for f in FEATURES])
    samples = _samples(_rows(3, seed=3))
    samples[1]["features"][feature] = None
    del samples[2]["features"][feature]
    response = _post(api, samples)
    assert response.status_code == 400
    assert response.json()["errors"] == [
        {"row": 1, "field": f"features.{feature}", "message": refused},
        {
            "row": 2,
            "field": f"features.{feature}",
            "message": "missing feature (send null for a missing value)",
        },
    ]
    assert not PredictionSample.objects.filter(model=model).exists()
    assert not SamplePart.objects.filter(model=model).exists()


@pytest.mark.django_db
def test_a_csv_reference_may_leave_an_allowed_vector_empty_but_not_half_empty(
    client_for: Callable[[str], APIClient],
) -> None:
    api = client_for("ingest")
    assert api.post("/api/v1/models", MODEL, format="json").status_code == 201
    header = ",".join([f"emb[{i}]" for i in range(DIM)] + ["review", "x", "label"])
    good = f"{header}\n1,2,3,4,fine,0.5,0\n,,,,,0.1,1\n4,3,2,1,good,0.2,0\n"
    response = api.post(f"/api/v1/models/{NAME}/reference", good, content_type="text/csv")
    assert response.status_code == 201, response.json()
    state = reference_state(model=RegisteredModel.objects.get(name=NAME))
    assert state is not None
    assert state.summary.column("emb").vectors.tolist() == [[1, 2, 3, 4], [4, 3, 2, 1]]
    assert state.summary.column("review").n == 2

    # Cells are parsed before values are checked: a non-number cell is named first, alone.
    half = f"{header}\n1,,3,4,fine,0.5,0\n"
    response = api.post(f"/api/v1/models/{NAME}/reference", half, content_type="text/csv")
    assert response.status_code == 400
    assert response.json()["errors"] == [
        {"row": 0, "field": "features.emb", "message": "element 1: not a number: ''"}
    ]
    nan = f"{header}\n1,2,3,4,fine,0.5,0\n1,nan,3,4,fine,0.5,0\n"
    response = api.post(f"/api/v1/models/{NAME}/reference", nan, content_type="text/csv")
    assert response.status_code == 400
    assert response.json()["errors"] == [
        {
            "row": 1,
            "field": "features.emb",
            "message": "element 1 is not finite (NaN and infinity are rejected)",
        }
    ]
    assert ReferenceDataset.objects.count() == 1  # the first upload's, nothing of the refused ones


def _checked(api: APIClient, samples: list[dict[str, Any]]) -> QualityCheck:
    assert _post(api, samples).status_code == 200
    response = api.post(
        f"/api/v1/models/{NAME}/checks", {"start": iso(at()), "end": iso(at(hours=1))}, format="json"
    )
    assert response.status_code in (200, 201), response.json()
    return QualityCheck.objects.get(pk=response.json()["id"])


def _evidently_model(reference: np.ndarray, current: np.ndarray) -> tuple[float, bool]:
    """evidently's default embedding test on fresh copies (it adds a column to its frames)."""
    method = ModelDriftMethod(bootstrap=len(reference) < 1000)
    score, drifted, _ = method(
        pd.DataFrame(current.astype("float64")), pd.DataFrame(reference.astype("float64"))
    )
    return float(score), bool(drifted)


@pytest.mark.django_db
def test_a_check_tests_the_present_rows_and_reports_the_missing_share(
    client_for: Callable[[str], APIClient], store: str
) -> None:
    api = client_for("ingest")
    model = _registered(api)
    rows = _rows(300, seed=4, shift=0.3)
    samples = _samples(rows)
    for i in range(0, 300, 10):  # 90 of 300 vectors missing (30%), 30 texts (10%)
        samples[i]["features"]["emb"] = samples[i + 1]["features"]["emb"] = None
        del samples[i + 2]["features"]["emb"]
        samples[i]["features"]["review"] = None
    check = _checked(api, samples)
    quality = check.data_quality
    assert quality["columns"]["emb"] == {"missing_count": 90, "missing_share": 0.3}
    assert quality["columns"]["review"] == {"missing_count": 30, "missing_share": 0.1}
    assert quality["columns"]["x"] == {"missing_count": 0, "missing_share": 0.0}
    assert quality["broken_feed"] is True and quality["reasons"] == ["emb: 30.0% missing (> 20%)"]
    # the window's present vectors in the order the check read them (the classifier's split
    # depends on it)
    window = sample_source().load(model=model, window=WindowBounds(at(), at(hours=1))).arrays
    current = np.vstack([v for v in window["emb"] if v is not None])
    reference = np.array([r["features"]["emb"] for r in _rows(400, seed=1)], dtype="float32")
    expected_score, expected_drift = _evidently_model(reference, current)
    emb = check.drift["columns"]["emb"]
    assert (emb["n_reference"], emb["n_current"]) == (400, 210)
    assert emb["score"] == pytest.approx(expected_score, abs=1e-12) and emb["drifted"] is expected_drift
    assert check.drift["columns"]["review"]["n_current"] == 270
    assert all(d["n_current"] == 270 for d in check.drift["descriptors"]["review"].values())
    client = Client()
    client.force_login(User.objects.create_user("ops", password="pw-ops-12345", is_staff=True))
    page = client.get(f"/models/{NAME}/?range=all").content.decode()
    assert "Broken feed: emb: 30.0% missing (&gt; 20%)" in page
    assert '<tr><td>emb</td><td class="n">30.0%</td>' in page
    assert '<tr><td>review</td><td class="n">10.0%</td>' in page


@pytest.mark.django_db
def test_compaction_keeps_missing_vectors_missing(
    client_for: Callable[[str], APIClient], settings: Any, tmp_path: Path
) -> None:
    settings.MEDIA_ROOT, settings.DRIFTWATCH_SAMPLE_SOURCE = str(tmp_path), "columnar"
    api = client_for("ingest")
    model = _registered(api)
    for k in range(2):
        samples = _samples(_rows(6, seed=5 + k), prefix=f"p{k}-")
        samples[k]["features"]["emb"] = None
        assert _post(api, samples).status_code == 200
    window = WindowBounds(at(), at(hours=1))
    before = sample_source("columnar").load(model=model, window=window).arrays
    assert parts_compact_due() == 1
    after = sample_source("columnar").load(model=model, window=window).arrays
    assert sorted(after["sample_id"][[v is None for v in after["emb"]]]) == ["p0-0", "p1-1"]
    assert sorted(map(str, after["sample_id"])) == sorted(map(str, before["sample_id"]))
