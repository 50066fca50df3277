"""A batch over the row limit is refused by counting, before any sample becomes a Python object,
and an accepted one is validated and stored a chunk at a time: either way its peak memory stays
within a few times its body (bench/ingest_memory.py measures the process)."""

import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from django.test import override_settings

from core.batch import CHUNK_ROWS
from monitoring.models import GroundTruth, PredictionSample
from registry.models import RegisteredModel
from tests.platform.conftest import make_model, stored_features

pytestmark = pytest.mark.django_db


def _body(samples: int) -> bytes:
    one = '{{"id":"s{i}","features":{{"age":{a},"income":1000.5,"city":"paris"}},"prediction":"no"}}'
    return ('{"samples":[' + ",".join(one.format(i=i, a=i % 90) for i in range(samples)) + "]}").encode()


@override_settings(DRIFTWATCH_MAX_BATCH_ROWS=1_000)
@pytest.mark.parametrize("key", ["samples", "labels"])
def test_a_batch_over_the_row_limit_is_refused_within_a_few_times_its_size(ingest: Any, key: str) -> None:
    make_model()
    body = _body(200_000).replace(b'{"samples"', b'{"' + key.encode() + b'"', 1)
    tracemalloc.start()
    try:
        path = "predictions" if key == "samples" else "labels"
        response = ingest.post(f"/api/v1/models/churn/{path}", body, content_type="application/json")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert response.status_code == 400
    assert response.json()["errors"][0] == {
        "row": None,
        "field": key,
        "message": "at most 1000 rows per request, got 200000",
    }
    assert peak < 4 * len(body), f"peak {peak / len(body):.1f}x the body"
    assert not PredictionSample.objects.exists()


def _traced_post(client: Any, path: str, body: bytes) -> tuple[Any, int]:
    tracemalloc.start()
    try:
        response = client.post(path, body, content_type="application/json")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return response, peak


# An accepted batch is validated and stored a chunk at a time (core.batch.CHUNK_ROWS rows): what
# stays alive across chunks is the body (read twice over by the test client and the view), its
# raw spans (64 bytes a row) and each id's row index (about 120 bytes a row). Measured under
# tracemalloc at 20,000 rows: samples (95-byte rows) 6.0x the body, labels (29-byte rows, so the
# per-row bookkeeping weighs more) 8.3x; parsed whole they took over 20x.
# bench/ingest_memory.py measures the whole process.
SAMPLES_PEAK_LIMIT = 8
LABELS_PEAK_LIMIT = 12


def test_an_accepted_batch_is_stored_within_a_few_times_its_size(
    ingest: Any, settings: Any, tmp_path: Path
) -> None:
    # The columnar store keeps the request's columns (monitoring.store.columns), not its objects.
    settings.MEDIA_ROOT = str(tmp_path)
    make_model()
    body = _body(20_000)
    response, peak = _traced_post(ingest, "/api/v1/models/churn/predictions", body)
    assert response.status_code == 200, response.json()
    assert response.json() == {"accepted": 20_000, "duplicates": 0}
    assert PredictionSample.objects.count() == 20_000
    assert peak < SAMPLES_PEAK_LIMIT * len(body), f"peak {peak / len(body):.1f}x the body"


def test_an_accepted_labels_batch_is_stored_within_a_few_times_its_size(ingest: Any) -> None:
    make_model()
    ingest.post("/api/v1/models/churn/predictions", _body(CHUNK_ROWS + 10), content_type="application/json")
    one = '{{"id":"s{i}","label":"{label}"}}'
    rows = ",".join(one.format(i=i, label=("no", "yes")[i % 2]) for i in range(20_000))
    body = ('{"labels":[' + rows + "]}").encode()
    response, peak = _traced_post(ingest, "/api/v1/models/churn/labels", body)
    assert response.status_code == 200, response.json()
    assert response.json() == {"matched": CHUNK_ROWS + 10, "pending": 20_000 - CHUNK_ROWS - 10}
    assert GroundTruth.objects.count() == 20_000
    assert peak < LABELS_PEAK_LIMIT * len(body), f"peak {peak / len(body):.1f}x the body"


def test_a_bad_row_in_a_late_chunk_stores_nothing_and_names_its_row_in_the_request(ingest: Any) -> None:
    make_model()
    bad_row = 2 * CHUNK_ROWS + 321
    body = _body(3 * CHUNK_ROWS).replace(
        f'{{"id":"s{bad_row}",'.encode(), f'{{"id":"s{bad_row}","colour":"red",'.encode(), 1
    )
    response = ingest.post("/api/v1/models/churn/predictions", body, content_type="application/json")
    assert response.status_code == 400
    assert response.json()["errors"] == [{"row": bad_row, "field": "colour", "message": "unknown field"}]
    assert not PredictionSample.objects.exists()


def test_a_bad_label_in_a_late_chunk_stores_nothing_and_names_its_row_in_the_request(ingest: Any) -> None:
    make_model()
    bad_row = CHUNK_ROWS + 7
    labels = [{"id": f"s{i}", "label": "maybe" if i == bad_row else "no"} for i in range(2 * CHUNK_ROWS)]
    response = ingest.post("/api/v1/models/churn/labels", {"labels": labels}, format="json")
    assert response.status_code == 400
    errors = response.json()["errors"]
    assert [(e["row"], e["field"]) for e in errors] == [(bad_row, "label")]
    assert not GroundTruth.objects.exists()


def test_an_id_repeated_in_a_later_chunk_is_a_duplicate_and_its_first_row_is_kept(ingest: Any) -> None:
    make_model()
    body = _body(2 * CHUNK_ROWS).replace(
        f'{{"id":"s{CHUNK_ROWS + 5}","features":{{"age":'.encode(), b'{"id":"s3","features":{"age":', 1
    )
    response = ingest.post("/api/v1/models/churn/predictions", body, content_type="application/json")
    assert response.json() == {"accepted": 2 * CHUNK_ROWS - 1, "duplicates": 1}
    assert stored_features(RegisteredModel.objects.get(name="churn"))["s3"]["age"] == 3
