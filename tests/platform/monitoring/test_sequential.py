"""The per-model sequential detector: fed once per label, in arrival order, persisted, and
raising accuracy_drop with its evidence beside the window rule."""

import itertools
import pickle
import threading
import time
from datetime import timedelta
from typing import Any

import numpy as np
import pytest
from django.db import connection, transaction
from django.utils import timezone
from river.drift import ADWIN

from monitoring.checks import quality_check_run
from monitoring.models import (
    Alert,
    BacklogBatch,
    DetectorBacklog,
    GroundTruth,
    MonitoringPolicy,
    PredictionSample,
    QualityCheck,
    SequentialDetector,
)
from monitoring.sequential import _degradations, _take_unfed, detector_feed, label_known_at
from monitoring.services import labels_ingest
from monitoring.window import scheduled_window
from tests.clock import T0, at, wall_clock
from tests.platform.monitoring.factories import monitored_model, rows, send, unfed

LATER = at(days=1)
# Labels sent without a timestamp are known from their arrival (received_at, the wall clock):
# the tests that feed them "known by LATER" send them while the clock reads a few hours after T0.
SENT_AT = at(hours=3)


def feed(model, known_by=LATER):  # type: ignore[no-untyped-def]
    with transaction.atomic():
        return detector_feed(model=model, known_by=known_by)


def fed_order(model, known_by=LATER):  # type: ignore[no-untyped-def]
    """The sample ids of the labels a feed takes, in the order it feeds them."""
    with transaction.atomic():
        _, label_ids = _take_unfed(model, known_by)
    sample_ids = dict(GroundTruth.objects.filter(pk__in=label_ids).values_list("pk", "sample_id"))
    return [sample_ids[pk] for pk in label_ids]


def predict(model, sample_id, *, at_time, prediction=1):  # type: ignore[no-untyped-def]
    """One prediction made at `at_time`, received when the wall clock reads now."""
    PredictionSample.objects.create(model=model, sample_id=sample_id, timestamp=at_time,
                                    received_at=timezone.now(), prediction=prediction)  # fmt: skip


def label(model, sample_id, value=1, stamped=None):  # type: ignore[no-untyped-def]
    body = {"id": sample_id, "label": value} | ({"timestamp": stamped.isoformat()} if stamped else {})
    labels_ingest(model=model, body={"labels": [body]})


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
    reference = ADWIN()
    expected, any_detection = [], []
    for n, error in enumerate(errors, start=1):
        before = reference.estimation
        reference.update(int(error))
        if reference.drift_detected:
            any_detection.append(n)
            if reference.estimation > before:
                expected.append(n)
    # Feeds of 500, and feeds that end on a detection: the next one must start a new window first.
    bounds = sorted({0, *range(500, 3000, 500), *any_detection, 3000})
    detections = []
    for part, (lo, hi) in enumerate(itertools.pairwise(bounds)):  # each feed loads the state the last stored
        with wall_clock(SENT_AT):
            send(model, data[lo:hi], start=at(seconds=lo), prefix=f"p{part}-")
        detections += [d["label_number"] for d in feed(model).detections]
    assert detections == expected and len(expected) >= 1 and any_detection
    assert min(expected) > 1500, "no degradation before the change"
    stored = pickle.loads(bytes(SequentialDetector.objects.get(model=model).state))  # noqa: S301 (ours)
    assert (stored.width, stored.total, stored.drift_detected) == (
        reference.width,
        reference.total,
        reference.drift_detected,
    )


def _river_degradations(detector: Any, errors: list[float]) -> list[tuple[int, float, float, int]]:
    """river's ADWIN as it is, label by label: (position, rate before, after, window) of each
    detection that raised the rate."""
    found = []
    for n, error in enumerate(errors):
        before = detector.estimation
        detector.update(error)
        if detector.drift_detected and detector.estimation > before:
            found.append((n, before, detector.estimation, int(detector.width)))
    return found


@pytest.mark.parametrize("start", ["fresh", "midway", "just_detected"])
def test_the_feed_finds_each_degradation_with_river_adwins_rates_and_window(start: str) -> None:
    """One feed holding several detections (rises and falls, the replayed windows from the
    loaded state and from resets), from a new detector, one fed before, and one whose last label
    was a detection: positions, rates before and after, and windows equal river's own ADWIN's,
    and so does the detector's state after the feed."""
    rng = np.random.default_rng(11)
    rates = [0.05, 0.4, 0.1, 0.6, 0.2, 0.7]
    errors = np.concatenate([rng.random(1200) < r for r in rates]).astype(float).tolist()
    prefix: list[float] = []
    if start == "midway":
        prefix = (rng.random(700) < 0.3).astype(float).tolist()
    state = ADWIN()
    for error in prefix:
        state.update(error)
    if start == "just_detected":
        while not state.drift_detected:
            state.update(float(rng.random() < (0.05 if state.width < 400 else 0.9)))
    saved = pickle.dumps(state)

    def loaded() -> Any:
        return pickle.loads(saved)  # noqa: S301 (ours)

    ours, theirs = loaded(), loaded()
    expected = _river_degradations(theirs, errors)
    assert _degradations(ours, errors, loaded) == expected and len(expected) >= 2
    assert (ours.width, ours.total, ours.drift_detected) == (
        theirs.width,
        theirs.total,
        theirs.drift_detected,
    )


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
    assert len(unfed(model)) == 300, "every label still waits"
    assert "sequential" not in QualityCheck.objects.get().decisions


@pytest.mark.django_db
@pytest.mark.parametrize("label_first", [False, True], ids=["prediction first", "label first"])
def test_a_label_is_fed_exactly_when_its_known_time_by_label_known_at_is_reached(label_first: bool) -> None:
    # Known times are set in Python by label_known_at, when the label is stored after its
    # prediction, or by the first feed after its prediction came: either way the rule itself,
    # for live labels, replayed ones, labels sent before their prediction and labels that carry
    # the client's timestamp. Each label is fed by a feed known by its known time, and not by
    # one a microsecond earlier.
    model = monitored_model()
    cases = [  # (prediction's time, prediction received, label received, client timestamp)
        (T0, T0, at(hours=1), None),
        (T0, at(days=3), at(days=3, minutes=5), None),
        (at(hours=2), at(hours=2, minutes=1), at(hours=1), None),
        (T0, at(days=2), at(days=2, hours=1), at(minutes=30)),
        (at(hours=5), at(days=1), at(hours=20), None),
    ]
    known = {}
    for i, (predicted, prediction_received, label_received, stamped) in enumerate(cases):
        steps = [
            (prediction_received, lambda: predict(model, f"k{i}", at_time=predicted)),  # noqa: B023
            (label_received, lambda: label(model, f"k{i}", stamped=stamped)),  # noqa: B023
        ]
        for when, step in reversed(steps) if label_first else steps:
            with wall_clock(when, tick=False):
                step()
        known[f"k{i}"] = label_known_at(labelled_at=stamped, received_at=label_received, predicted_at=predicted,
                                        prediction_received_at=prediction_received)  # fmt: skip
    assert len(set(known.values())) == len(cases), "distinct known times: one label per step"
    for sample_id, when in sorted(known.items(), key=lambda item: item[1]):
        assert feed(model, known_by=when - timedelta(microseconds=1)).fed == 0, sample_id
        assert feed(model, known_by=when).fed == 1, sample_id
        assert sample_id not in unfed(model), sample_id


@pytest.mark.django_db
def test_a_label_sent_before_its_prediction_waits_for_it_then_is_fed_in_known_time_order() -> None:
    model = monitored_model()
    with wall_clock(at(minutes=1), tick=False):
        predict(model, "live", at_time=at(minutes=1))
    with wall_clock(at(minutes=30), tick=False):
        label(model, "live")  # known at 00:30
    with wall_clock(at(hours=1), tick=False):
        label(model, "early")  # stored after "live" (a larger label id), before its prediction
    assert feed(model, known_by=at(minutes=29)).fed == 0, "early waits for its prediction"
    assert list(DetectorBacklog.objects.values_list("sample_id", flat=True)) == ["early"]
    assert unfed(model) == ["early", "live"], "live in a batch, known after 00:29"
    with wall_clock(at(hours=2), tick=False):
        predict(model, "early", at_time=T0)  # replayed 2 h late: early counts as known at T0
    assert fed_order(model) == ["early", "live"]


@pytest.mark.django_db
def test_labels_known_at_the_same_time_are_fed_in_the_order_they_were_stored() -> None:
    model = monitored_model()
    with wall_clock(at(minutes=1), tick=False):
        for sample_id in ("a0", "a1", "a2"):
            predict(model, sample_id, at_time=T0)
    for sample_id in ("a2", "a0", "a1"):  # one request each: label ids in this order
        with wall_clock(at(hours=1), tick=False):
            label(model, sample_id, stamped=at(minutes=30))
    assert fed_order(model) == ["a2", "a0", "a1"]


@pytest.mark.django_db
def test_a_label_sent_again_while_it_waits_is_fed_with_its_new_value_at_its_new_known_time() -> None:
    model = monitored_model()
    with wall_clock(T0, tick=False):
        predict(model, "a", at_time=T0, prediction=1)
    with wall_clock(at(hours=1), tick=False):
        label(model, "a", value=0)  # wrong, known at 01:00
    with wall_clock(at(hours=2), tick=False):
        label(model, "a", value=1, stamped=at(minutes=30))  # right, known at 00:30
    assert feed(model, known_by=at(minutes=30) - timedelta(microseconds=1)).fed == 0
    assert feed(model, known_by=at(minutes=30)).fed == 1
    assert pickle.loads(bytes(SequentialDetector.objects.get(model=model).state)).total == 0.0  # noqa: S301


@pytest.mark.django_db
def test_a_label_sent_again_before_its_prediction_is_fed_with_its_new_value_once_it_comes() -> None:
    model = monitored_model()
    with wall_clock(at(hours=1), tick=False):
        label(model, "a", value=0)
    with wall_clock(at(hours=2), tick=False):
        label(model, "a", value=1)
        predict(model, "a", at_time=T0, prediction=1)
    assert feed(model).fed == 1
    assert pickle.loads(bytes(SequentialDetector.objects.get(model=model).state)).total == 0.0  # noqa: S301


def stamped_labels(model, values):  # type: ignore[no-untyped-def]
    """One labels request: {sample id: (label, client timestamp)}."""
    body = [{"id": i, "label": v, "timestamp": when.isoformat()} for i, (v, when) in values.items()]
    labels_ingest(model=model, body={"labels": body})


def detector_total(model):  # type: ignore[no-untyped-def]
    return pickle.loads(bytes(SequentialDetector.objects.get(model=model).state)).total  # noqa: S301


@pytest.mark.django_db
def test_a_feed_ending_inside_a_batchs_hour_takes_its_labels_known_by_then_and_leaves_the_rest() -> None:
    """Labels known within one hour share a batch: a feed known by a time in that hour feeds the
    ones known by then; the rest stay, and one of them sent again while it waits is taken out of
    the batch and queued anew with its new value and known time."""
    model = monitored_model()
    with wall_clock(at(hours=2), tick=False):
        for i in range(5):
            predict(model, f"p{i}", at_time=T0, prediction=1)
        stamped_labels(model, {f"p{i}": (1, at(minutes=10 * (i + 1))) for i in range(5)})
    assert BacklogBatch.objects.filter(model=model).count() == 1
    assert feed(model, known_by=at(minutes=20)).fed == 2
    rest = BacklogBatch.objects.get(model=model)
    assert (rest.size, rest.earliest) == (3, at(minutes=30)), "the batch keeps the three known later"
    with wall_clock(at(hours=3), tick=False):
        stamped_labels(model, {"p3": (0, at(minutes=45))})  # now wrong, and known at 00:45
    assert unfed(model) == ["p2", "p3", "p4"], "queued once"
    assert feed(model, known_by=at(minutes=40)).fed == 1, "p2; p3 is known at 00:45 now"
    assert detector_total(model) == 0.0
    assert feed(model, known_by=at(minutes=45)).fed == 1
    assert detector_total(model) == 1.0, "p3 fed with its new value"
    assert feed(model).fed == 1 and unfed(model) == [] and not BacklogBatch.objects.exists()
    assert SequentialDetector.objects.get(model=model).fed == 5


@pytest.mark.skipif(connection.vendor != "postgresql", reason="row locks across connections are PostgreSQL's")
@pytest.mark.django_db(transaction=True)
def test_a_label_sent_again_while_a_feed_holds_its_batch_waits_and_finds_it_where_the_feed_left_it() -> None:
    """A feed that takes part of a batch rewrites it in place: a request sending one of the labels
    it left waits for the feed's transaction, then finds the label there and queues it anew (were
    the rest moved to a new row, the request would find nothing and the old value be fed)."""
    model = monitored_model(reference_rows=200)
    for i in range(3):
        predict(model, f"p{i}", at_time=T0, prediction=1)
    stamped_labels(model, {f"p{i}": (1, at(minutes=10 * (i + 1))) for i in range(3)})
    failed: list[BaseException] = []

    def resend() -> None:
        try:
            stamped_labels(model, {"p2": (0, at(minutes=35))})
        except BaseException as exc:  # noqa: BLE001 (asserted below)
            failed.append(exc)
        finally:
            connection.close()

    waiting = "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
    with transaction.atomic():
        assert detector_feed(model=model, known_by=at(minutes=20)).fed == 2
        thread = threading.Thread(target=resend)
        thread.start()
        with connection.cursor() as cursor:
            for _ in range(500):
                cursor.execute("SELECT pg_stat_clear_snapshot()")  # else read once per transaction
                cursor.execute(waiting)
                if cursor.fetchone()[0]:
                    break
                time.sleep(0.01)
            else:
                pytest.fail("the request never waited for the feed's lock")
    thread.join(timeout=30)
    assert not thread.is_alive() and failed == []
    assert unfed(model) == ["p2"]
    assert feed(model, known_by=at(minutes=30)).fed == 0, "p2 is known at 00:35 now"
    assert feed(model, known_by=at(minutes=35)).fed == 1 and detector_total(model) == 1.0


@pytest.mark.django_db
def test_batches_hold_one_hour_of_known_times_each_up_to_their_size(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("monitoring.sequential.BATCH_LABELS", 4)
    model = monitored_model()
    known = {f"q{i}": at(hours=i % 3, minutes=i) for i in range(15)}  # 5 labels in each of 3 hours
    with wall_clock(at(hours=4), tick=False):
        for sample_id in known:
            predict(model, sample_id, at_time=T0)
        stamped_labels(model, {sample_id: (1, when) for sample_id, when in known.items()})
    batches = BacklogBatch.objects.filter(model=model).values_list("earliest", "size")
    hours = sorted(((earliest - T0) // timedelta(hours=1), size) for earliest, size in batches)
    assert hours == [(0, 1), (0, 4), (1, 1), (1, 4), (2, 1), (2, 4)]
    assert fed_order(model) == sorted(known, key=known.__getitem__)


@pytest.mark.django_db
def test_a_label_whose_prediction_never_comes_waits_and_is_never_fed() -> None:
    model = monitored_model()
    with wall_clock(SENT_AT):
        label(model, "orphan")
        send(model, rows(10, seed=9), start=T0, prefix="a")
    assert feed(model).fed == 10
    assert feed(model, known_by=at(days=2)).fed == 0
    assert list(DetectorBacklog.objects.values_list("sample_id", flat=True)) == ["orphan"]
    assert unfed(model) == ["orphan"], "in no batch"


@pytest.mark.django_db
def test_a_label_sent_again_before_its_feed_waits_once_and_is_fed_with_its_new_value() -> None:
    model = monitored_model()
    data = rows(300, seed=7, flip=0.0)  # every prediction right: an error stream of zeros
    with wall_clock(SENT_AT):
        send(model, data, start=T0, prefix="a")
        labels_ingest(model=model, body={"labels": [{"id": "a0", "label": 1 - data[0]["label"]}]})
    assert len(unfed(model)) == 300
    assert feed(model).fed == 300
    stored = SequentialDetector.objects.get(model=model)
    assert stored.fed == 300
    assert pickle.loads(bytes(stored.state)).total == 1.0, "the one wrong label is the re-sent one"  # noqa: S301


@pytest.mark.django_db
def test_a_check_that_fails_after_feeding_feeds_nothing_and_its_rerun_feeds_each_label_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model = monitored_model(window_size=3000)
    send(model, rows(400, seed=8), start=T0, prefix="a")
    window = scheduled_window(MonitoringPolicy.objects.get(model=model), timezone.now())

    def broken(**_: object) -> None:
        raise RuntimeError("the check fails after the detector's feed, in the same transaction")

    monkeypatch.setattr("monitoring.checks.alerts_evaluate", broken)
    with pytest.raises(RuntimeError):
        quality_check_run(model_id=model.pk, window=window)
    assert len(unfed(model)) == 400, "the feed was rolled back"
    assert not SequentialDetector.objects.filter(model=model, fed__gt=0).exists()
    monkeypatch.undo()
    ran = quality_check_run(model_id=model.pk, window=window)
    assert ran is not None and ran.decisions["sequential"]["fed"] == 400
    assert SequentialDetector.objects.get(model=model).fed == 400
    assert unfed(model) == []
    assert feed(model, known_by=timezone.now()).fed == 0, "nothing is fed twice"


BEFORE_BACKLOG = [("monitoring", "0021_check_model_window_end")]
WITH_BACKLOG = [("monitoring", "0022_detector_backlog")]
WITH_KNOWN_TIMES = [("monitoring", "0023_backlog_known_at_error")]


@pytest.mark.django_db(transaction=True)
def test_the_backlog_migration_queues_the_labels_not_fed_yet_and_only_those(migrate: Any) -> None:
    model = monitored_model(reference_rows=200)
    old = migrate(BEFORE_BACKLOG).get_model("monitoring", "GroundTruth")
    for sample_id, fed in (("fed", True), ("waiting", False)):
        old.objects.create(
            model_id=model.pk, sample_id=sample_id, label=1, received_at=T0, fed_to_detector=fed
        )
    backlog = migrate(WITH_BACKLOG).get_model("monitoring", "DetectorBacklog")
    waiting = backlog.objects.values_list("label__sample_id", "model_id", "sample_id", "value")
    assert list(waiting) == [("waiting", model.pk, "waiting", 1)], "with the label as the feed reads it"


@pytest.mark.django_db(transaction=True)
def test_the_known_time_migration_fills_the_labels_whose_prediction_is_in_and_reverses(migrate: Any) -> None:
    model = monitored_model(reference_rows=200)
    with wall_clock(at(days=2), tick=False):
        predict(model, "replayed", at_time=T0, prediction=1)
    old = migrate(WITH_BACKLOG)
    for sample_id in ("replayed", "orphan"):
        truth = old.get_model("monitoring", "GroundTruth").objects.create(
            model_id=model.pk, sample_id=sample_id, label=0, received_at=at(days=2, hours=1)
        )
        old.get_model("monitoring", "DetectorBacklog").objects.create(
            label_id=truth.pk, model_id=model.pk, sample_id=sample_id, value=0, received_at=truth.received_at
        )
    filled = migrate(WITH_KNOWN_TIMES).get_model("monitoring", "DetectorBacklog").objects
    assert dict(filled.values_list("sample_id", "known_at")) == {
        "replayed": label_known_at(
            labelled_at=None,
            received_at=at(days=2, hours=1),
            predicted_at=T0,
            prediction_received_at=at(days=2),
        ),  # fmt: skip
        "orphan": None,
    }
    assert dict(filled.values_list("sample_id", "error")) == {"replayed": 1.0, "orphan": None}
    back = migrate(WITH_BACKLOG).get_model("monitoring", "DetectorBacklog").objects
    assert sorted(back.values_list("sample_id", flat=True)) == ["orphan", "replayed"]


BEFORE_BATCHES = [("monitoring", "0025_sample_unmoved_index")]
WITH_BATCHES = [("monitoring", "0026_backlog_batches")]


@pytest.mark.django_db(transaction=True)
def test_the_batches_migration_moves_the_labels_whose_prediction_is_in_and_reverses(migrate: Any) -> None:
    model = monitored_model(reference_rows=200)
    old = migrate(BEFORE_BATCHES)
    queued = {  # sample id: (known time, error); None: waiting for its prediction
        "early": (at(minutes=5) + timedelta(microseconds=7), 1.0),
        "late": (at(hours=3, minutes=1), 0.25),
        "same-hour": (at(minutes=59), 0.0),
        "orphan": (None, None),
    }
    for sample_id, (known_at, error) in queued.items():
        truth = old.get_model("monitoring", "GroundTruth").objects.create(
            model_id=model.pk, sample_id=sample_id, label=0, received_at=at(hours=4), labelled_at=known_at
        )
        old.get_model("monitoring", "DetectorBacklog").objects.create(
            label_id=truth.pk, model_id=model.pk, sample_id=sample_id, value=0, received_at=truth.received_at,
            labelled_at=known_at, known_at=known_at, error=error,
        )  # fmt: skip
    new = migrate(WITH_BATCHES)
    assert list(
        new.get_model("monitoring", "DetectorBacklog").objects.values_list("sample_id", flat=True)
    ) == ["orphan"]
    batches = new.get_model("monitoring", "BacklogBatch").objects.order_by("earliest")
    assert [(b.earliest, b.size) for b in batches] == [
        (at(minutes=5) + timedelta(microseconds=7), 2),
        (at(hours=3, minutes=1), 1),
    ]
    assert unfed(model) == ["early", "late", "orphan", "same-hour"]
    with transaction.atomic():
        errors, label_ids = _take_unfed(model, at(hours=3, minutes=1))
        transaction.set_rollback(True)
    by_id = dict(GroundTruth.objects.values_list("pk", "sample_id"))
    assert [(by_id[i], e) for i, e in zip(label_ids, errors, strict=True)] == [
        ("early", 1.0), ("same-hour", 0.0), ("late", 0.25)
    ]  # fmt: skip
    back = migrate(BEFORE_BATCHES).get_model("monitoring", "DetectorBacklog").objects
    assert sorted(back.values_list("sample_id", "known_at", "error", "value", "received_at")) == sorted(
        (sample_id, known_at, error, 0, at(hours=4)) for sample_id, (known_at, error) in queued.items()
    )
