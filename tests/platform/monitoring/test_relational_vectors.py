"""The relational source's embeddings: on PostgreSQL read in a COPY of their own by row id (the
JSON path's results, bit for bit), on SQLite through the JSON path; a missing vector, a window
of several chunks and a row of another length come back as the JSON path reads them."""

from datetime import timedelta
from typing import Any

import numpy as np
import pytest
from django.db import connection
from django.utils import timezone

from monitoring import window as relational
from monitoring.models import PredictionSample
from monitoring.samples import WindowBounds
from monitoring.services import predictions_ingest
from monitoring.window import RelationalSampleSource
from registry.models import RegisteredModel
from registry.services import model_register
from tests.clock import T0

pytestmark = pytest.mark.django_db
HOUR = timedelta(hours=1)
DIM = 8


@pytest.fixture(autouse=True)
def relational_store(settings: Any) -> None:
    settings.DRIFTWATCH_SAMPLE_SOURCE = "relational"


def _model() -> RegisteredModel:
    return model_register(
        data={
            "name": "emb-rel",
            "task": "regression",
            "features": [
                {"name": "e", "type": "embedding", "dim": DIM, "missing": "allow"},
                {"name": "x", "type": "numerical"},
            ],
        }
    )


def _vectors(n: int) -> np.ndarray:
    vectors = np.random.default_rng(5).normal(size=(n, DIM)).astype("float32")
    # the smallest subnormal and normal, the largest float32, a number binary cannot hold (not
    # -0.0: PostgreSQL's jsonb stores numbers as numeric, which has no negative zero)
    vectors[0, :4] = np.array([1e-45, 1.1754944e-38, 3.4028235e38, 0.1], dtype="float32")
    return vectors


def _ingest(model: RegisteredModel, vectors: np.ndarray, missing: set[int]) -> None:
    body = [
        {
            "id": f"s{i}",
            "timestamp": (T0 + timedelta(seconds=i)).isoformat(),
            "features": {"e": None if i in missing else vectors[i].tolist(), "x": float(i)},
            "prediction": 0.5,
        }
        for i in range(len(vectors))
    ]
    predictions_ingest(model=model, body={"samples": body})


def _load(model: RegisteredModel, window: WindowBounds) -> dict[str, Any]:
    return RelationalSampleSource().load(model=model, window=window).arrays


def _json_path(model: RegisteredModel, window: WindowBounds) -> dict[str, Any]:
    """The window read as before: every value as JSON text in the window's one query."""
    frame = relational._window_frame(model, relational._feature_kinds(model, None), window)
    return {name: frame[name].to_numpy() for name in frame.columns}


def _bits(vector: np.ndarray) -> list[int]:
    return vector.view("uint32").tolist()


def test_vectors_read_back_bit_identical_with_a_missing_one_in_place() -> None:
    model = _model()
    vectors = _vectors(30)
    _ingest(model, vectors, missing={7})
    loaded = _load(model, WindowBounds(T0, T0 + HOUR))
    by_x = dict(zip(loaded["x"].tolist(), loaded["e"], strict=True))
    assert len(by_x) == 30 and by_x[7.0] is None
    for i in set(range(30)) - {7}:
        assert by_x[float(i)].dtype == np.float32
        assert _bits(by_x[float(i)]) == _bits(vectors[i])


def test_a_window_over_several_chunks_keeps_the_windows_order(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(relational, "VECTOR_CHUNK_BYTES", 300)  # a few lines a chunk
    model = _model()
    vectors = _vectors(60)
    _ingest(model, vectors, missing={3, 41})
    window = WindowBounds(None, T0 + HOUR, last_n=50)  # newest first
    loaded, before = _load(model, window), _json_path(model, window)
    assert loaded["sample_id"].tolist() == [f"s{i}" for i in range(59, 9, -1)]
    assert loaded["sample_id"].tolist() == before["sample_id"].tolist()
    for got, was, i in zip(loaded["e"], before["e"], range(59, 9, -1), strict=True):
        assert (got is None) == (was is None) == (i == 41)
        if got is not None:
            assert _bits(got) == _bits(was) == _bits(vectors[i])


def test_a_stored_vector_of_another_length_is_read_as_the_json_path_reads_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    model = _model()
    vectors = _vectors(12)
    _ingest(model, vectors, missing=set())
    # stored before a change of dim, say: validation would refuse it now
    PredictionSample.objects.create(
        model=model,
        sample_id="old",
        timestamp=T0 + timedelta(minutes=30),
        received_at=timezone.now(),
        features={"e": [1.0, 2.0, 3.0], "x": 99.0},
        prediction=0.5,
    )
    window = WindowBounds(T0, T0 + HOUR)
    with caplog.at_level("INFO", logger="monitoring.window"):
        loaded = _load(model, window)
    by_x = dict(zip(loaded["x"].tolist(), loaded["e"], strict=True))
    assert by_x[99.0].tolist() == [1.0, 2.0, 3.0]
    assert all(_bits(by_x[float(i)]) == _bits(vectors[i]) for i in range(12))
    assert ("read again as JSON" in caplog.text) == (connection.vendor == "postgresql")


def test_an_empty_window_has_an_empty_vector_column() -> None:
    model = _model()
    loaded = _load(model, WindowBounds(T0, T0 + HOUR))
    assert len(loaded["e"]) == 0 and len(loaded["x"]) == 0
