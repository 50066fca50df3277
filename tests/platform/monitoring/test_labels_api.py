from typing import Any

import pytest
from rest_framework.test import APIClient

from core.batch import CHUNK_ROWS
from monitoring.models import GroundTruth, PredictionSample
from registry.models import RegisteredModel
from tests.clock import FUTURE, PAST, at, iso
from tests.platform.conftest import make_model, make_sample

LABELS = "/api/v1/models/churn/labels"
PREDICTIONS = "/api/v1/models/churn/predictions"


def send_labels(client: APIClient, labels: list[dict[str, Any]], url: str = LABELS) -> Any:
    return client.post(url, {"labels": labels}, format="json")


def joined(model: RegisteredModel) -> dict[str, Any]:
    labels = dict(GroundTruth.objects.filter(model=model).values_list("sample_id", "label"))
    return {
        s: labels.get(s)
        for s in PredictionSample.objects.filter(model=model).values_list("sample_id", flat=True)
    }


def test_labels_after_predictions_are_matched(ingest: APIClient, churn: RegisteredModel) -> None:
    ingest.post(PREDICTIONS, {"samples": [make_sample(i) for i in range(3)]}, format="json")
    response = send_labels(ingest, [{"id": "s0", "label": "yes"}, {"id": "s1", "label": "no"}])
    assert response.json() == {"matched": 2, "pending": 0}
    assert joined(churn) == {"s0": "yes", "s1": "no", "s2": None}


def test_labels_before_predictions_are_pending_then_joined(ingest: APIClient, churn: RegisteredModel) -> None:
    assert send_labels(ingest, [{"id": "s5", "label": "yes"}]).json() == {"matched": 0, "pending": 1}
    ingest.post(PREDICTIONS, {"samples": [make_sample(5)]}, format="json")
    assert joined(churn) == {"s5": "yes"}


def test_a_resent_label_is_stored_once_with_its_latest_value(
    ingest: APIClient, churn: RegisteredModel
) -> None:
    send_labels(ingest, [{"id": "s1", "label": "no"}])
    send_labels(ingest, [{"id": "s1", "label": "yes"}])
    assert list(GroundTruth.objects.filter(model=churn).values_list("label", flat=True)) == ["yes"]


@pytest.mark.parametrize(
    ("label", "message"),
    [("maybe", "unknown class"), (None, "classes"), ({"a": 1}, "classes")],
)
def test_bad_classification_label_is_rejected(
    ingest: APIClient, churn: RegisteredModel, label: Any, message: str
) -> None:
    response = send_labels(ingest, [{"id": "a", "label": "yes"}, {"id": "b", "label": label}])
    assert response.status_code == 400
    error = response.json()["errors"][0]
    assert (error["row"], error["field"]) == (1, "label")
    assert message in error["message"]
    assert not GroundTruth.objects.exists()


def test_nan_label_is_rejected_for_regression(ingest: APIClient, db: None) -> None:
    make_model(name="price", task="regression")
    raw = b'{"labels": [{"id": "a", "label": 3.5}, {"id": "b", "label": NaN}]}'
    response = ingest.post("/api/v1/models/price/labels", raw, content_type="application/json")
    assert response.status_code == 400
    assert response.json()["errors"][0] == {
        "row": 1,
        "field": "label",
        "message": "must be finite (NaN and infinity are rejected)",
    }
    assert not GroundTruth.objects.exists()


def test_label_without_id_is_rejected(ingest: APIClient, churn: RegisteredModel) -> None:
    response = send_labels(ingest, [{"label": "yes"}])
    assert response.status_code == 400
    assert response.json()["errors"][0]["field"] == "id"


def test_integer_classes_accept_their_string_form(ingest: APIClient, db: None) -> None:
    make_model(name="digits", classes=[0, 1, 2])
    response = send_labels(
        ingest, [{"id": "a", "label": 2}, {"id": "b", "label": "1"}], url="/api/v1/models/digits/labels"
    )
    assert response.status_code == 200
    assert sorted(GroundTruth.objects.values_list("label", flat=True)) == [1, 2]


def test_label_delay_counts_from_the_label_timestamp_when_sent(
    ingest: APIClient, churn: RegisteredModel
) -> None:
    from monitoring.checks import check_compute
    from monitoring.selectors import policy_for
    from monitoring.window import window_load

    sample = make_sample(0) | {"timestamp": iso(PAST)}
    ingest.post(PREDICTIONS, {"samples": [sample]}, format="json")
    response = send_labels(ingest, [{"id": "s0", "label": "yes", "timestamp": iso(at(minutes=2, base=PAST))}])
    assert response.status_code == 200
    window = window_load(model=churn, start=None, end=at(days=1, base=PAST))
    result = check_compute(model=churn, policy=policy_for(churn), window=window, reference=None)
    assert result["labels"]["label_delay_median_s"] == 120.0


@pytest.mark.parametrize("value", ["yesterday", iso(PAST, tz=False), iso(FUTURE)])
def test_a_bad_label_timestamp_is_a_400_and_nothing_is_stored(
    ingest: APIClient, churn: RegisteredModel, value: str
) -> None:
    response = send_labels(
        ingest, [{"id": "s0", "label": "yes"}, {"id": "s1", "label": "no", "timestamp": value}]
    )
    assert response.status_code == 400
    assert (response.json()["errors"][0]["row"], response.json()["errors"][0]["field"]) == (1, "timestamp")
    assert not GroundTruth.objects.exists()


def test_a_lone_surrogate_in_a_later_chunk_of_labels_is_a_400_and_nothing_is_stored(
    ingest: APIClient, churn: RegisteredModel
) -> None:
    """Rows are read a chunk at a time by the service, not ahead (core.batch.UnreadableRow)."""
    rows = [b'{"id": "s%d", "label": "yes"}' % i for i in range(CHUNK_ROWS + 10)]
    rows[CHUNK_ROWS + 5] = b'{"id": "s1005", "label": "\\udc00"}'
    body = b'{"labels": [' + b",".join(rows) + b"]}"
    response = ingest.post(LABELS, body, content_type="application/json")
    assert response.status_code == 400
    assert {k: response.json()["errors"][0][k] for k in ("row", "field")} == {
        "row": CHUNK_ROWS + 5,
        "field": "label",
    }
    assert not GroundTruth.objects.exists()
