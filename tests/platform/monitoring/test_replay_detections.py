"""Issue 24 §5: a replay of past traffic (prediction timestamps in the past, labels posted without
a timestamp) gets the sequential detections the same traffic got live."""

from datetime import timedelta
from typing import Any

import pytest
from django.db import transaction

from monitoring.checks import quality_check_run
from monitoring.models import MonitoringPolicy, QualityCheck
from monitoring.sequential import detector_feed, label_known_at
from monitoring.services import labels_ingest, predictions_ingest
from monitoring.window import scheduled_window
from registry.models import RegisteredModel
from tests.clock import at, wall_clock
from tests.platform.monitoring.factories import monitored_model, rows, unfed

HOURS = 6
PER_HOUR = 400
STEP = timedelta(seconds=5)  # 400 predictions in the first 34 minutes of each hour


def traffic(hour: int) -> list[dict[str, Any]]:
    """Three good hours, then three where the model is wrong four times in ten."""
    return rows(PER_HOUR, seed=200 + hour, flip=0.05 if hour < 3 else 0.4)


def predictions(hour: int) -> dict[str, Any]:
    samples = [
        {
            "id": f"h{hour}-{i}",
            "timestamp": (at(hours=hour) + i * STEP).isoformat(),
            "features": r["features"],
            "prediction": r["prediction"],
            "probabilities": r["probabilities"],
        }
        for i, r in enumerate(traffic(hour))
    ]
    return {"samples": samples}


def labels(hour: int) -> dict[str, Any]:
    return {"labels": [{"id": f"h{hour}-{i}", "label": r["label"]} for i, r in enumerate(traffic(hour))]}


def hourly_model(name: str) -> RegisteredModel:
    return monitored_model(
        name, window_kind="hours", window_size=1, min_samples=100, min_labels=100, threshold_rule="absolute"
    )


def check(model: RegisteredModel, hour: int) -> QualityCheck:
    window = scheduled_window(MonitoringPolicy.objects.get(model=model), at(hours=hour + 1))
    ran = quality_check_run(model_id=model.pk, window=window)
    assert ran is not None
    return QualityCheck.objects.get(pk=ran.pk)


def sequential(checks: list[QualityCheck]) -> list[dict[str, Any]]:
    return [c.decisions["sequential"] for c in checks]


def live(model: RegisteredModel) -> list[QualityCheck]:
    """Posted as it happens: predictions at the end of their hour, labels 30 s later, the
    scheduled check at the hour's end."""
    checks = []
    for hour in range(HOURS):
        with wall_clock(at(hours=hour, minutes=59)):
            predictions_ingest(model=model, body=predictions(hour))
        with wall_clock(at(hours=hour, minutes=59, seconds=30)):
            labels_ingest(model=model, body=labels(hour))
        with wall_clock(at(hours=hour + 1)):
            checks.append(check(model, hour))
    return checks


def replay(model: RegisteredModel) -> list[QualityCheck]:
    """Posted days later, all at once (labels without a timestamp), then each past hour checked."""
    for hour in range(HOURS):
        predictions_ingest(model=model, body=predictions(hour))
    for hour in range(HOURS):
        labels_ingest(model=model, body=labels(hour))
    return [check(model, hour) for hour in range(HOURS)]


@pytest.mark.django_db
def test_a_replay_of_past_traffic_gets_the_detections_live_traffic_got() -> None:
    live_checks = live(hourly_model("live"))
    replayed = replay(hourly_model("replay"))
    assert [c.decisions["sequential"]["fed"] for c in live_checks] == [PER_HOUR] * HOURS
    assert any(s["degraded"] for s in sequential(live_checks)), "the degradation is found live"
    assert not any(s["degraded"] for s in sequential(live_checks)[:3]), "and not before it"
    assert sequential(replayed) == sequential(live_checks)
    assert [c.decisions["accuracy_drop"] for c in replayed] == [
        c.decisions["accuracy_drop"] for c in live_checks
    ]


@pytest.mark.django_db
def test_a_label_is_known_when_its_replayed_prediction_was_made_plus_the_replays_own_delay() -> None:
    model = hourly_model("known")
    with wall_clock(at(days=2), tick=False):
        predictions_ingest(model=model, body=predictions(0))
    with wall_clock(at(days=2, seconds=40), tick=False):
        labels_ingest(model=model, body=labels(0))
    known = at(seconds=40) + 3 * STEP  # h0-3's: the feed known by then feeds it, one a µs earlier does not
    with transaction.atomic():
        assert detector_feed(model=model, known_by=known - timedelta(microseconds=1)).fed == 3
        assert "h0-3" in unfed(model)
        assert detector_feed(model=model, known_by=known).fed == 1
        assert "h0-3" not in unfed(model)


def test_the_known_time_rule() -> None:
    made, posted = at(), at(days=2)
    # The client's timestamp wins; live (no lag) a label is known when it arrives.
    assert label_known_at(
        labelled_at=at(hours=5), received_at=posted, predicted_at=made, prediction_received_at=posted
    ) == at(hours=5)
    assert label_known_at(
        labelled_at=None, received_at=at(hours=1), predicted_at=made, prediction_received_at=made
    ) == at(hours=1)
    # A replay: shifted back by the prediction's lag, never before the prediction.
    assert label_known_at(
        labelled_at=None,
        received_at=posted + timedelta(minutes=5),
        predicted_at=made,
        prediction_received_at=posted,
    ) == made + timedelta(minutes=5)
    assert (
        label_known_at(
            labelled_at=None,
            received_at=posted - timedelta(hours=1),
            predicted_at=made,
            prediction_received_at=posted,
        )
        == made
    )
    # A prediction stamped a little ahead of its arrival (clock skew): the label's arrival.
    assert label_known_at(
        labelled_at=None, received_at=at(hours=2), predicted_at=at(hours=1), prediction_received_at=made
    ) == at(hours=2)
