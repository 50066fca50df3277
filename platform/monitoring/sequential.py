"""The per-model sequential detector: river's ADWIN on the error stream, label by label.

A fixed window with a tolerance decides once per check on a batch of labels; ADWIN looks at
every label as it arrives and cuts its window where the error rate changed. The detector's
state lives in the database (pickled; written and read only by this module), each label is
fed once (it waits in a BacklogBatch, taken out in the same transaction as the new state), in
the order the truths became known (``label_known_at``), and only labels known by the check's
window end, so a backfill replays the detector as it would have run. A batch holds its labels'
known times and their predictions' errors, so the feed reads the batches alone; a label whose
prediction is not in yet waits in DetectorBacklog until a feed finds it in.
"""

import itertools
import logging
import pickle
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

import numpy as np
from django.db import connection
from django.db.models import Exists, OuterRef

from monitoring.models import BacklogBatch, DetectorBacklog, GroundTruth, PredictionSample, SequentialDetector
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
    """Queue new labels for the detector: those whose prediction (in ``predictions``, by sample id)
    is in go into batches with their known time and error, the others wait for it."""
    error = _error_of(model)
    ready: list[tuple[int, int, float]] = []
    waiting: list[NewLabel] = []
    for label in labels:
        predicted = predictions.get(label.sample_id)
        if predicted is None:
            waiting.append(label)
        else:
            known_at, err = _known_and_error(label, predicted, error)
            ready.append((label.label_id, _microseconds(known_at), err))
    DetectorBacklog.objects.bulk_create(
        [DetectorBacklog(model=model, **label._asdict()) for label in waiting], batch_size=1000
    )
    if ready:
        ids, known, errors = zip(*ready, strict=True)
        _batches_add(model, Entries(np.array(ids, np.int64), np.array(known, np.int64), np.array(errors)))


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_HOUR = 3_600_000_000  # microseconds
BATCH_LABELS = 100_000  # labels per batch at most (2.4 MB of arrays)


def _microseconds(when: datetime) -> int:
    """A time as the batches keep it: exact microseconds since the Unix epoch."""
    return (when - _EPOCH) // timedelta(microseconds=1)


@dataclass(frozen=True)
class Entries:
    """Labels for the detector, as a batch holds them."""

    label_ids: np.ndarray  # int64
    known_at: np.ndarray  # int64, microseconds since the Unix epoch
    errors: np.ndarray  # float64

    def select(self, which: Any) -> "Entries":
        """Those a mask, an order or a slice picks."""
        return Entries(self.label_ids[which], self.known_at[which], self.errors[which])

    @staticmethod
    def joined(parts: list["Entries"]) -> "Entries":
        return Entries(
            np.concatenate([np.empty(0, np.int64), *(part.label_ids for part in parts)]),
            np.concatenate([np.empty(0, np.int64), *(part.known_at for part in parts)]),
            np.concatenate([np.empty(0), *(part.errors for part in parts)]),
        )


_INT, _FLOAT = np.dtype("<i8"), np.dtype("<f8")


def batch_entries(batch: BacklogBatch) -> Entries:
    """A batch's labels as arrays."""
    return _entries(batch.pk, batch.size, batch.label_ids, batch.known_at, batch.errors)


def _entries(pk: int, size: int, label_ids: Any, known_at: Any, errors: Any) -> Entries:
    """A batch's arrays (its stored bytes) as Entries."""
    entries = Entries(
        np.frombuffer(label_ids, _INT).astype(np.int64),
        np.frombuffer(known_at, _INT).astype(np.int64),
        np.frombuffer(errors, _FLOAT).astype(np.float64),
    )
    if not len(entries.label_ids) == len(entries.known_at) == len(entries.errors) == size:
        raise RuntimeError(f"backlog batch {pk} does not hold {size} labels")  # never fed garbled
    return entries


def _batch_fill(batch: BacklogBatch, entries: Entries) -> BacklogBatch:
    """Set a batch's fields to hold these labels (at least one)."""
    batch.earliest = _EPOCH + timedelta(microseconds=int(entries.known_at.min()))
    batch.first_label, batch.last_label = int(entries.label_ids.min()), int(entries.label_ids.max())
    batch.size = len(entries.label_ids)
    batch.label_ids = entries.label_ids.astype(_INT).tobytes()
    batch.known_at = entries.known_at.astype(_INT).tobytes()
    batch.errors = entries.errors.astype(_FLOAT).tobytes()
    return batch


def _batches_add(model: RegisteredModel, entries: Entries) -> None:
    """New batches holding these labels: one per hour of their known times, of BATCH_LABELS at
    most, so a feed up to a time takes whole batches but for the hour it ends in."""
    hours = entries.known_at // _HOUR
    order = np.argsort(hours, kind="stable")
    entries, hours = entries.select(order), hours[order]
    cuts = [0, *(np.flatnonzero(np.diff(hours)) + 1).tolist(), len(hours)]
    batches = [
        _batch_fill(BacklogBatch(model=model), entries.select(slice(start, min(start + BATCH_LABELS, end))))
        for begin, end in itertools.pairwise(cuts)
        for start in range(begin, end, BATCH_LABELS)
    ]
    BacklogBatch.objects.bulk_create(batches)


def _batches_take(model: RegisteredModel, keep: Callable[[Entries], np.ndarray], **among: Any) -> Entries:
    """Take labels out of the model's batches (those ``among`` selects, locked in id order): each
    batch keeps the labels ``keep`` marks (rewritten in place, so a request waiting on its lock
    finds them there), and goes if it keeps none → the labels taken."""
    taken, emptied = [], []
    for pk, entries in _batches_locked(model, among):
        kept = keep(entries)
        if kept.all():
            continue
        taken.append(entries.select(~kept))
        if kept.any():
            _batch_fill(BacklogBatch(pk=pk, model=model), entries.select(kept)).save(force_update=True)
        else:
            emptied.append(pk)
    BacklogBatch.objects.filter(pk__in=emptied).delete()  # batches, not labels: a short list
    return Entries.joined(taken)


def _batches_locked(model: RegisteredModel, among: dict[str, Any]) -> list[tuple[int, Entries]]:
    """The model's batches ``among`` selects, locked in id order: (id, labels) each. PostgreSQL
    sends their arrays in binary (a 10M window's first feed, 60 batches of 5,000,000 labels:
    0.15-0.19 s, against 0.53-0.73 s through Django's cursor, which reads bytea as hex text)."""
    batches = BacklogBatch.objects.select_for_update().filter(model=model, **among).order_by("pk")
    if connection.vendor != "postgresql":
        return [(batch.pk, batch_entries(batch)) for batch in batches]
    sql, params = batches.values_list("pk", "size", "label_ids", "known_at", "errors").query.sql_with_params()
    with server_cursor() as cursor:
        cursor.execute(sql, params, binary=True)
        return [(row[0], _entries(*row)) for row in cursor]


def backlog_refresh(
    *, model: RegisteredModel, labels: list[NewLabel], predictions: Mapping[str, Predicted]
) -> None:
    """Labels sent again: those still waiting for the detector (for their prediction, or in a
    batch) are queued anew, with their new value and times and the known time and error that
    follow from them; a feed took the others already (fed as they were). Locked first: a feed
    that takes one meanwhile waits for this transaction, and finds it gone."""
    if not labels:
        return
    label_ids = np.array(sorted(label.label_id for label in labels), np.int64)
    waiting = set(
        DetectorBacklog.objects.select_for_update()
        .filter(pk__in=label_ids.tolist())
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    _backlog_delete(list(waiting))
    batched = _batches_take(
        model,
        lambda entries: ~np.isin(entries.label_ids, label_ids),
        first_label__lte=label_ids[-1],
        last_label__gte=label_ids[0],
    )
    waiting.update(batched.label_ids.tolist())
    backlog_queue(
        model=model, labels=[label for label in labels if label.label_id in waiting], predictions=predictions
    )


def _known_and_error(
    label: NewLabel, predicted: Predicted, error: Callable[[Any, Any], float]
) -> tuple[datetime, float]:
    """The label's known time and its prediction's error."""
    value, predicted_at, prediction_received_at = predicted
    known_at = label_known_at(
        labelled_at=label.labelled_at,
        received_at=label.received_at,
        predicted_at=predicted_at,
        prediction_received_at=prediction_received_at,
    )
    return known_at, error(value, label.value)


def _backlog_repair(model: RegisteredModel) -> None:
    """Queue the waiting labels whose prediction is in now: labels sent before their prediction,
    and labels stored beside it by a transaction that could not see it yet (neither request saw
    the other's row, so only a later reader can join them: this one, before every feed). They
    are taken out and queued anew, as a label that came after its prediction is. Usually no
    row, 1 ms; a label whose prediction never comes stays. A label sent before its prediction
    costs this feed about 20 µs (100,000: 1.9-2.1 s, load 1.0-1.3)."""
    waiting = _take_waiting(model)
    backlog_queue(
        model=model,
        labels=[label for label, _ in waiting],
        predictions={label.sample_id: predicted for label, predicted in waiting},
    )


# The rows it deletes are exactly those it returns.
_TAKE_WAITING_POSTGRES = """
DELETE FROM monitoring_detectorbacklog AS b
 USING monitoring_predictionsample AS p
 WHERE b.model_id = %s AND p.model_id = b.model_id AND p.sample_id = b.sample_id
RETURNING b.label_id, b.sample_id, b.value, b.received_at, b.labelled_at, p.prediction, p.timestamp, p.received_at
"""


def _take_waiting(model: RegisteredModel) -> list[tuple[NewLabel, Predicted]]:
    """Take the model's waiting labels whose prediction is in out of the backlog, each with its
    prediction. PostgreSQL: one statement with binary results (100,000 such labels: 1.1 s; the
    ORM's three correlated subqueries per label took 3.8 s to read them)."""
    if connection.vendor != "postgresql":
        rows = (
            DetectorBacklog.objects.filter(model=model)
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
    """Delete these waiting labels, in IN lists SQLite accepts."""
    for start in range(0, len(label_ids), FEED_CHUNK):
        DetectorBacklog.objects.filter(pk__in=label_ids[start : start + FEED_CHUNK]).delete()


def _take_unfed(model: RegisteredModel, known_by: datetime) -> tuple[list[float], np.ndarray]:
    """Take the labels to feed out of the model's backlog → their errors and label ids, in the
    order they became known (then by label id): those known by `known_by` whose prediction is in
    (a label waiting for it is in no batch yet). Call inside the transaction that stores the
    detector's new state."""
    _backlog_repair(model)
    cut = _microseconds(known_by)
    taken = _batches_take(model, lambda entries: entries.known_at > cut, earliest__lte=known_by)
    order = np.lexsort((taken.label_ids, taken.known_at))
    return taken.errors[order].tolist(), taken.label_ids[order]


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
    detection), so at most the feed's labels up to its last detection are fed twice. Both feeds
    run in C (``map``), not in a Python loop: a 10M window's first feed, 5,000,000 labels and
    3,676,191 of them replayed, 0.43 s against 0.50 s.
    tests/platform/monitoring/test_sequential.py holds this to river's own ADWIN, detection for
    detection, across feeds."""
    start_rate = detector.estimation
    window, detected = detector._helper, detector.drift_detected
    hits = []  # (position, rate after, window after)
    rest, fed = iter(errors), 0
    while fed < len(errors):
        if detected:
            detector._reset()
            window = detector._helper
        # The labels up to the next detection: fed by map, the detection found by compress.
        hit = next(itertools.compress(itertools.count(fed), map(window.update, rest)), None)
        if hit is None:  # every label fed, the last one detected nothing
            detected = False
            break
        detected, fed = True, hit + 1
        hits.append((hit, _estimation(window), int(window.get_width())))
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
            deque(map(helper.update, errors[begun:n]), maxlen=0)
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
        GroundTruth.objects.filter(pk__in=[int(label_ids[n]) for n, *_ in found]).values_list(
            "pk", "sample_id"
        )
    )
    update.detections = [
        {
            "sample_id": sample_ids[int(label_ids[n])],
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
