"""The per-model sequential detector: fed once per label, in arrival order, persisted, and
raising accuracy_drop with its evidence beside the window rule."""

from datetime import timedelta

import numpy as np
import pytest
from django.db import transaction
from django.utils import timezone
from river.drift import ADWIN

from monitoring.checks import quality_check_run
from monitoring.models import (
    Alert,
    GroundTruth,
    MonitoringPolicy,
    PredictionSample,
    QualityCheck,
    SequentialDetector,
)
from monitoring.sequential import detector_feed, label_known_at
from monitoring.services import labels_ingest
from monitoring.window import scheduled_window
from tests.clock import T0, at, wall_clock
from tests.platform.monitoring.factories import monitored_model, rows, send

LATER = at(days=1)
# Labels sent without a timestamp are known from their arrival (received_at, the wall clock):
# the tests that feed them "known by LATER" send them while the clock reads a few hours after T0.
SENT_AT = at(hours=3)


def feed(model, known_by=LATER):  # type: ignore[no-untyped-def]
    with transaction.atomic():
        return detector_feed(model=model, known_by=known_by)


@pytest.mark.django_db
def test_each_label_is_fed_once_even_when_resent() -> None:
    model = monitored_model()
    data = rows(300, seed=1)
    with wall_clock(SENT_AT):
        send(model, data, start=T0, prefix="a")
    assert feed(model).fed == 300
    assert feed(model).fed == 0, "nothing new"
    with wall_clock(SENT_AT):
        labels_ingest(model=model, body={"labels": [{"id": "a0", "label": data[0]["label"]}]})
    assert feed(model).fed == 0, "a re-sent label is not counted again"
    assert SequentialDetector.objects.get(model=model).fed == 300


@pytest.mark.django_db
def test_labels_wait_for_their_prediction_and_for_the_window_end() -> None:
    model = monitored_model()
    labels_ingest(model=model, body={"labels": [{"id": "early", "label": 1}]})
    assert feed(model).fed == 0, "no prediction yet: no error to feed"
    send(model, rows(10, seed=2), start=T0, prefix="b", labelled=False)
    labels_ingest(
        model=model,
        body={
            "labels": [
                {"id": f"b{i}", "label": 1, "timestamp": (T0 + timedelta(hours=i)).isoformat()}
                for i in range(10)
            ]
        },
    )
    assert feed(model, known_by=T0 + timedelta(hours=4)).fed == 5, "labels known by then: hours 0-4"
    assert feed(model, known_by=LATER).fed == 5


@pytest.mark.django_db
def test_the_persisted_detector_matches_adwin_fed_the_same_errors_in_one_go() -> None:
    model = monitored_model()
    rng = np.random.default_rng(3)
    errors = np.concatenate([rng.random(1500) < 0.1, rng.random(1500) < 0.3]).astype(int)
    data = rows(3000, seed=3, flip=0.0)
    for i, r in enumerate(data):
        if errors[i]:
            r["prediction"] = 1 - r["label"]
    detections = []
    for part in range(6):  # six feeds, each loading the state the previous one stored
        chunk = range(500 * part, 500 * (part + 1))
        with wall_clock(SENT_AT):
            send(model, [data[i] for i in chunk], start=at(seconds=500 * part), prefix=f"p{part}-")
        detections += [d["label_number"] for d in feed(model).detections]
    reference = ADWIN()
    expected = []
    for n, error in enumerate(errors, start=1):
        before = reference.estimation
        reference.update(int(error))
        if reference.drift_detected and reference.estimation > before:
            expected.append(n)
    assert detections == expected and len(expected) >= 1
    assert min(expected) > 1500, "no degradation before the change"


@pytest.mark.django_db
def test_a_degradation_found_by_the_detector_raises_accuracy_drop_with_its_evidence() -> None:
    model = monitored_model(window_size=3000, tolerance=0.3, resolve_after=1)
    send(model, rows(1500, seed=4, flip=0.05), start=T0, prefix="good")
    send(model, rows(600, seed=5, flip=0.4), start=T0 + timedelta(seconds=1500), prefix="bad")
    # Labels count once known: these arrived now (no timestamp), so the window ends now.
    window = scheduled_window(MonitoringPolicy.objects.get(model=model), timezone.now())
    ran = quality_check_run(model_id=model.pk, window=window)
    assert ran is not None
    check = QualityCheck.objects.get(pk=ran.pk)
    assert check.metrics["accuracy"] > check.decisions["baseline"] - 0.3, (
        "the window rule alone would not fire"
    )
    assert check.decisions["accuracy_drop"] is True
    assert check.decisions["accuracy_drop_by"] == "sequential detector"
    evidence = check.decisions["sequential"]["evidence"]
    assert evidence["error_after"] > evidence["error_before"] and evidence["label_number"] > 1500
    alert = Alert.objects.get(model=model, kind="accuracy_drop")
    assert "ADWIN" in alert.message and alert.details["decisions"]["sequential"]["degraded"] is True


@pytest.mark.django_db
def test_a_policy_without_the_detector_feeds_nothing() -> None:
    model = monitored_model(sequential_detector=False)
    send(model, rows(300, seed=6), start=T0, prefix="a")
    window = scheduled_window(MonitoringPolicy.objects.get(model=model), T0 + timedelta(hours=1))
    quality_check_run(model_id=model.pk, window=window)
    assert not GroundTruth.objects.filter(fed_to_detector=True).exists()
    assert "sequential" not in QualityCheck.objects.get().decisions


@pytest.mark.django_db
def test_the_settled_known_time_is_label_known_at_for_every_kind_of_lag() -> None:
    # PostgreSQL settles known times in one UPDATE, the embedded default row by row: both must be
    # the rule itself, for live labels, replayed ones, labels sent before their prediction and
    # labels that carry the client's timestamp.
    model = monitored_model()
    cases = [  # (prediction's time, prediction received, label received, client timestamp)
        (T0, T0, at(hours=1), None),
        (T0, at(days=3), at(days=3, minutes=5), None),
        (at(hours=2), at(hours=2, minutes=1), at(hours=1), None),
        (T0, at(days=2), at(days=2, hours=1), at(minutes=30)),
        (at(hours=5), at(days=1), at(hours=20), None),
    ]
    for i, (predicted, prediction_received, label_received, stamped) in enumerate(cases):
        PredictionSample.objects.create(model=model, sample_id=f"k{i}", timestamp=predicted,
                                        received_at=prediction_received, features={}, prediction=1)  # fmt: skip
        GroundTruth.objects.create(model=model, sample_id=f"k{i}", label=1, received_at=label_received,
                                   labelled_at=stamped)  # fmt: skip
    assert feed(model, known_by=at(days=30)).fed == len(cases)
    for i, (predicted, prediction_received, label_received, stamped) in enumerate(cases):
        expected = label_known_at(labelled_at=stamped, received_at=label_received, predicted_at=predicted,
                                  prediction_received_at=prediction_received)  # fmt: skip
        assert GroundTruth.objects.get(model=model, sample_id=f"k{i}").known_at == expected, i
