"""The per-model sequential detector: river's ADWIN on the error stream, label by label.

A fixed window with a tolerance decides once per check on a batch of labels; ADWIN looks at
every label as it arrives and cuts its window where the error rate changed. The detector's
state lives in the database (pickled; written and read only by this module), each label is
fed once (it waits in DetectorBacklog, deleted in the same transaction as the new state), in the
order the truths became known (``label_known_at``), and only labels known by the check's window
end, so a backfill replays the detector as it would have run. A waiting label carries its known
time and its prediction's error from the moment both are known (its prediction is in), so the
feed reads the backlog alone.
"""

import logging
import pickle
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple, cast

import numpy as np
import orjson
from django.db import connection
from django.db.models import Exists, OuterRef

from monitoring.models import DetectorBacklog, GroundTruth, PredictionSample, SequentialDetector
from monitoring.pg import server_cursor
from registry.models import RegisteredModel

logger = logging.getLogger(__name__)

# Ids per IN (...) list: SQLite caps the variables of a statement.
FEED_CHUNK = 5000


@dataclass
class DetectorUpdate:
    fed: int = 0  # labels fed by this call
    total: int = 0  # labels fed to the detector so far
    detections: list[dict[str, Any]] = field(default_factory=list)  # degradations found meanwhile

    @property
    def degraded(self) -> bool:
        return bool(self.detections)

    def to_dict(self) -> dict[str, Any]:
        return {
            "detector": "ADWIN",
            "fed": self.fed,
            "total_fed": self.total,
            "degraded": self.degraded,
            "evidence": self.detections[-1] if self.detections else None,
        }


def _new_detector() -> Any:
    from river.drift import ADWIN  # only on the check path

    return ADWIN()


def _error_of(model: RegisteredModel) -> Callable[[Any, Any], float]:
    """The error of one prediction against its label: 0/1 for a classifier, else the absolute error."""
    return _misclassified if model.is_classification else _absolute_error


def _misclassified(prediction: Any, label: Any) -> float:
    return float(prediction != label)


def _absolute_error(prediction: Any, label: Any) -> float:
    return abs(float(prediction) - float(label))


def label_known_at(
    *,
    labelled_at: datetime | None,
    received_at: datetime,
    predicted_at: datetime,
    prediction_received_at: datetime,
) -> datetime:
    """When a label counts as known: the client's timestamp when it sent one; else its arrival,
    moved back by as much as its prediction arrived after the prediction's own time, and never
    before the prediction was made.

    Live, a prediction is posted as it is made (no lag), so a label is known when it arrives. A
    replay posts history late: every prediction by ``now - its timestamp``, and the labels posted
    with it would all read as known now, after every past window's end, and feed no past check.
    Shifted back by their prediction's lag, they keep the delay the replay gave them (posted
    right after the predictions: none) and are fed in the same order, with the same detections,
    as the same traffic live (with a label delay shorter than a window)."""
    if labelled_at is not None:
        return labelled_at
    lag = prediction_received_at - predicted_at
    return max(predicted_at, min(received_at, received_at - lag))


Predicted = tuple[Any, datetime, datetime]  # a prediction's value, timestamp and received_at


class NewLabel(NamedTuple):
    """A label stored for the first time, as the detector's backlog queues it."""

    label_id: int
    sample_id: str
    value: Any
    received_at: datetime
    labelled_at: datetime | None


def label_predictions(*, model: RegisteredModel, sample_ids: list[str]) -> dict[str, Predicted]:
    """The stored predictions of these sample ids, by id: what their labels' known times and
    errors follow from."""
    if connection.vendor == "postgresql":
        return _label_predictions_postgres(model, sample_ids)
    found: dict[str, Predicted] = {}
    for start in range(0, len(sample_ids), FEED_CHUNK):
        rows = PredictionSample.objects.filter(
            model=model, sample_id__in=sample_ids[start : start + FEED_CHUNK]
        )
        for sample_id, value, predicted_at, received_at in rows.values_list(
            "sample_id", "prediction", "timestamp", "received_at"
        ):
            found[sample_id] = (value, predicted_at, received_at)
    return found


_PREDICTIONS_POSTGRES = """
SELECT sample_id, prediction, timestamp, received_at FROM monitoring_predictionsample
WHERE model_id = %s AND sample_id = ANY(%b::text[])
"""


def _label_predictions_postgres(model: RegisteredModel, sample_ids: list[str]) -> dict[str, Predicted]:
    """One statement with the ids as an array parameter, bound by the server (the ORM's IN
    lists of 5,000 ids were a new statement text each time: 10,000 labels' lookups took 0.32 s)."""
    with server_cursor() as cursor:
        cursor.execute(_PREDICTIONS_POSTGRES, (model.pk, sample_ids), binary=True)
        return {sample_id: (value, at, received) for sample_id, value, at, received in cursor}


def backlog_queue(
    *, model: RegisteredModel, labels: list[NewLabel], predictions: Mapping[str, Predicted]
) -> None:
    """Queue new labels for the detector, each with its known time and error where its
    prediction (in ``predictions``, by sample id) is in already."""
    error = _error_of(model)
    filled = [_known_and_error(label, predictions.get(label.sample_id), error) for label in labels]
    if connection.vendor == "postgresql":
        _queue_postgres(model, labels, filled)
        return
    rows = [
        DetectorBacklog(model=model, **label._asdict(), known_at=known_at, error=err)
        for label, (known_at, err) in zip(labels, filled, strict=True)
    ]
    DetectorBacklog.objects.bulk_create(rows, batch_size=1000)


_QUEUE_POSTGRES = """
INSERT INTO monitoring_detectorbacklog
    (label_id, model_id, sample_id, value, received_at, labelled_at, known_at, error)
SELECT u.l, %s, u.s, u.v, u.r, u.la, u.k, u.e
FROM unnest(%b::bigint[], %b::text[], %b::text[]::jsonb[], %b::timestamptz[], %b::timestamptz[],
            %b::timestamptz[], %b::float8[]) AS u(l, s, v, r, la, k, e)
"""


def _queue_postgres(
    model: RegisteredModel, labels: list[NewLabel], filled: list[tuple[datetime | None, float | None]]
) -> None:
    """One statement with array parameters: labels_ingest of 10,000 new labels took 0.8-0.9 s,
    against 1.2-1.5 s with the ORM's bulk_create (load 3.2)."""

    params = (
        model.pk,
        [label.label_id for label in labels],
        [label.sample_id for label in labels],
        [orjson.dumps(label.value).decode() for label in labels],
        [label.received_at for label in labels],
        [label.labelled_at for label in labels],
        [known_at for known_at, _ in filled],
        [err for _, err in filled],
    )
    with server_cursor() as cursor:
        cursor.execute(_QUEUE_POSTGRES, params)


def backlog_refresh(
    *, model: RegisteredModel, labels: list[NewLabel], predictions: Mapping[str, Predicted]
) -> None:
    """Labels sent again: those still waiting for the detector are queued anew, with their new
    value and times and the known time and error that follow from them; a feed took the others
    already (fed as they were). Locked first: a feed that takes one meanwhile waits for this
    transaction, and finds it gone. Replaced rather than updated: 10,000 waiting labels sent
    again took 1.4-1.5 s, against 6.5-13 s when the ORM's bulk_update rewrote three of their
    columns (load 3.2)."""
    waiting = set(
        DetectorBacklog.objects.select_for_update()
        .filter(pk__in=[label.label_id for label in labels])
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    _backlog_delete(list(waiting))
    backlog_queue(
        model=model, labels=[label for label in labels if label.label_id in waiting], predictions=predictions
    )


def _known_and_error(
    label: NewLabel, predicted: Predicted | None, error: Callable[[Any, Any], float]
) -> tuple[datetime | None, float | None]:
    """The label's known time and its prediction's error; both None while that is not in."""
    if predicted is None:
        return None, None
    value, predicted_at, prediction_received_at = predicted
    known_at = label_known_at(
        labelled_at=label.labelled_at,
        received_at=label.received_at,
        predicted_at=predicted_at,
        prediction_received_at=prediction_received_at,
    )
    return known_at, error(value, label.value)


def _backlog_repair(model: RegisteredModel) -> None:
    """Fill the waiting labels whose prediction is in now: labels sent before their prediction,
    and labels stored beside it by a transaction that could not see it yet (neither request saw
    the other's row, so only a later reader can join them: this one, before every feed). They
    are taken out and queued anew, as a label that came after its prediction is. Index backed
    (backlog_waiting): usually no row, 1 ms; a label whose prediction never comes stays. A label
    sent before its prediction costs this feed about 20 µs (100,000: 1.9-2.1 s, load 1.0-1.3),
    ten times what one queued with its prediction costs the feed."""
    waiting = _take_waiting(model)
    backlog_queue(
        model=model,
        labels=[label for label, _ in waiting],
        predictions={label.sample_id: predicted for label, predicted in waiting},
    )


# The rows it deletes are exactly those it returns, as in the feed's statement.
_TAKE_WAITING_POSTGRES = """
DELETE FROM monitoring_detectorbacklog AS b
 USING monitoring_predictionsample AS p
 WHERE b.model_id = %s AND b.known_at IS NULL AND p.model_id = b.model_id AND p.sample_id = b.sample_id
RETURNING b.label_id, b.sample_id, b.value, b.received_at, b.labelled_at, p.prediction, p.timestamp, p.received_at
"""


def _take_waiting(model: RegisteredModel) -> list[tuple[NewLabel, Predicted]]:
    """Take the model's waiting labels whose prediction is in out of the backlog, each with its
    prediction. PostgreSQL: one statement with binary results (100,000 such labels: 1.1 s; the
    ORM's three correlated subqueries per label took 3.8 s to read them)."""
    if connection.vendor != "postgresql":
        rows = (
            DetectorBacklog.objects.filter(model=model, known_at__isnull=True)
            .filter(Exists(PredictionSample.objects.filter(model=model, sample_id=OuterRef("sample_id"))))
            .values_list("label_id", "sample_id", "value", "received_at", "labelled_at")
        )
        labels = [NewLabel(*row) for row in rows]
        _backlog_delete([label.label_id for label in labels])
        predictions = label_predictions(model=model, sample_ids=[label.sample_id for label in labels])
        return [(label, predictions[label.sample_id]) for label in labels]
    with server_cursor() as cursor:
        cursor.execute(_TAKE_WAITING_POSTGRES, [model.pk], binary=True)
        return [(NewLabel(*row[:5]), (row[5], row[6], row[7])) for row in cursor]


def _backlog_delete(label_ids: list[int]) -> None:
    """Delete these backlog rows, in IN lists SQLite accepts."""
    for start in range(0, len(label_ids), FEED_CHUNK):
        DetectorBacklog.objects.filter(pk__in=label_ids[start : start + FEED_CHUNK]).delete()


# The feed's labels leave the backlog in the statement that reads them: the rows it deletes are
# exactly the rows it returns (a label queued meanwhile stays for the next feed). They come back
# as binary COPY rows (fixed width: each row's field count, then each field's length and its
# big-endian value), sorted here by numpy. 500,000 labels: COPY's rows took 0.13-0.4 s over the
# DELETE itself, one bytea of records built by string_agg 0.33-0.75 s (bench next to each other),
# and two arrays each ordered by the server more again.
_TAKE_POSTGRES = """
COPY (
    DELETE FROM monitoring_detectorbacklog WHERE model_id = %s AND known_at <= %s
    RETURNING label_id, known_at, error
) TO STDOUT (FORMAT binary)
"""
# int8 label_id, timestamptz known_at (microseconds since 2000-01-01, exact), float8 error.
_FED_ROW = np.dtype(
    [
        ("fields", ">i2"),
        ("label_id_size", ">i4"),
        ("label_id", ">i8"),
        ("known_at_size", ">i4"),
        ("known_at", ">i8"),
        ("error_size", ">i4"),
        ("error", ">f8"),
    ]
)
_COPY_HEADER, _COPY_TRAILER = 19, 2  # signature, flags and extension length; the -1 field count


def _take_unfed(model: RegisteredModel, known_by: datetime) -> tuple[list[float], list[int]]:
    """Take the labels to feed out of the model's backlog → their errors and label ids, in the
    order they became known (then by label id): those known by `known_by` whose prediction is in
    (a label waiting for it has no known time, so `known_at <= known_by` leaves it out). Call
    inside the transaction that stores the detector's new state. Elsewhere than on PostgreSQL
    the rows are read, then deleted before the pass (SQLite's cursor does not isolate writes to
    the tables it is reading)."""
    _backlog_repair(model)
    if connection.vendor == "postgresql":
        stream = bytearray()
        with server_cursor() as cursor, cursor.copy(_TAKE_POSTGRES, [model.pk, known_by]) as copy:
            for data in copy:
                stream += data
        taken = np.frombuffer(memoryview(stream)[_COPY_HEADER : len(stream) - _COPY_TRAILER], _FED_ROW)
        if not (taken["fields"] == 3).all():  # a changed layout fails here, never feeds garbage
            raise RuntimeError("unexpected COPY row layout from the detector backlog")
        order = np.lexsort((taken["label_id"], taken["known_at"]))
        return taken["error"][order].tolist(), taken["label_id"][order].tolist()
    rows = sorted(
        DetectorBacklog.objects.filter(model=model, known_at__lte=known_by).values_list(
            "known_at", "label_id", "error"
        )
    )
    label_ids = [label_id for _, label_id, _ in rows]
    _backlog_delete(label_ids)
    return cast(list[float], [error for *_, error in rows]), label_ids  # set with known_at


def _estimation(window: Any) -> float:
    width = window.get_width()
    return float(window.get_total() / width) if width else 0.0


def _degradations(
    detector: Any, errors: list[float], loaded: Callable[[], Any]
) -> list[tuple[int, float, float, int]]:
    """Feed ``errors`` to ``detector`` → its degradations: (position in the feed, error rate
    before, after, window). river's ``update`` is inlined (what river 0.26's does: a detection
    at the previous label resets the detector, then the window takes the value); its wrapper
    and the ``drift_detected`` property were 0.23 s of 500,000 labels' feed.

    The rate before a detection is the window's estimation after the label before it, which only
    a detection needs: the feed reads nothing else per label (each read of the window's width or
    total crosses into river's Rust as update does, and two of them per label doubled the
    loop), and the window up to each detection is replayed afterwards from where it began (the
    feed's first window from the detector as ``loaded``, a later one from the reset after a
    detection), so at most the feed's labels up to its last detection are fed twice.
    tests/platform/monitoring/test_sequential.py holds this to river's own ADWIN, detection for
    detection, across feeds."""
    start_rate = detector.estimation
    window, detected = detector._helper, detector.drift_detected
    hits = []  # (position, rate after, window after)
    for n, error in enumerate(errors):
        if detected:
            detector._reset()
            window = detector._helper
        detected = window.update(error)
        if detected:
            hits.append((n, _estimation(window), int(window.get_width())))
    detector._drift_detected = detected
    found = []
    begun, previous = 0, start_rate  # where the window that ends in the next hit began; the rate there
    for n, after, width in hits:
        if n == begun:  # the window's first label: the rate before it is the one the feed had
            before = previous
        else:
            replay = loaded()
            if begun > 0 or replay.drift_detected:  # reset as the feed was
                replay._reset()
            helper = replay._helper
            for error in errors[begun:n]:
                helper.update(error)
            before = _estimation(helper)
        if after > before:
            found.append((n, before, after, width))
        begun, previous = n + 1, after
    return found


def detector_feed(*, model: RegisteredModel, known_by: datetime) -> DetectorUpdate:
    """Feed every new label to the model's detector; call inside the check's transaction."""
    row, _ = SequentialDetector.objects.get_or_create(model=model)
    row = SequentialDetector.objects.select_for_update().get(pk=row.pk)  # one feeder at a time

    def loaded() -> Any:
        return pickle.loads(bytes(row.state)) if row.state else _new_detector()  # noqa: S301 (our own state)

    detector = loaded()
    errors, label_ids = _take_unfed(model, known_by)
    found = _degradations(detector, errors, loaded)
    update = DetectorUpdate(fed=len(errors), total=row.fed + len(errors))
    sample_ids = dict(
        GroundTruth.objects.filter(pk__in=[label_ids[n] for n, *_ in found]).values_list("pk", "sample_id")
    )
    update.detections = [
        {
            "sample_id": sample_ids[label_ids[n]],
            "label_number": row.fed + n + 1,
            "error_before": before,
            "error_after": after,
            "window": width,
        }
        for n, before, after, width in found
    ]
    if update.fed:
        row.state = pickle.dumps(detector)
        row.fed = update.total
        row.detections += len(update.detections)
        row.last_detection = update.detections[-1] if update.detections else row.last_detection
        row.save()
        logger.info(
            "detector of model %s fed %s label(s), %s degradation(s)",
            model.pk,
            update.fed,
            len(update.detections),
        )
    return update
