"""A batch over the row limit is refused by counting, before any sample becomes a Python object:
its peak memory stays within a few times its body (bench/ingest_memory.py measures the process)."""

import tracemalloc
from typing import Any

import pytest
from django.test import override_settings

from monitoring.models import PredictionSample
from tests.platform.conftest import make_model

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
