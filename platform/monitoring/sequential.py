"""The per-model sequential detector: river's ADWIN on the error stream, label by label.

A fixed window with a tolerance decides once per check on a batch of labels; ADWIN looks at
every label as it arrives and cuts its window where the error rate changed. The detector's
state lives in the database (pickled; written and read only by this module), each label is
fed once (GroundTruth.fed_to_detector, set in the same transaction as the new state), in the
order the truths became known (``label_known_at``), and only labels known by the check's window
end, so a backfill replays the detector as it would have run.
"""

import logging
import pickle
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import orjson
from django.db import connection
from django.db.models import DateTimeField, JSONField, OuterRef, Subquery

from monitoring.models import GroundTruth, PredictionSample, SequentialDetector
from registry.models import RegisteredModel

logger = logging.getLogger(__name__)

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


def _error(model: RegisteredModel, prediction: Any, label: Any) -> float:
    if model.is_classification:
        return float(prediction != label)
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


def _prediction(model: RegisteredModel, field_name: str, output_field: Any) -> Subquery:
    """One field of the label's prediction (the sample of the same id), as a subquery."""
    rows = PredictionSample.objects.filter(model=model, sample_id=OuterRef("sample_id"))
    return Subquery(rows.values(field_name)[:1], output_field=output_field)


def _settle_known_times(model: RegisteredModel) -> None:
    """Give each unfed label whose prediction is in its known time (once: a label sent again is
    reset by ingestion, and its prediction is never replaced). Not on PostgreSQL: there the feed's
    query computes them and its UPDATE stores them (``_UNFED_POSTGRES``)."""
    while True:
        pending = list(
            GroundTruth.objects.filter(model=model, fed_to_detector=False, known_at__isnull=True)
            .annotate(
                predicted_at=_prediction(model, "timestamp", DateTimeField()),
                prediction_received_at=_prediction(model, "received_at", DateTimeField()),
            )
            .filter(predicted_at__isnull=False)
            .only("id", "labelled_at", "received_at")[:FEED_CHUNK]
        )
        if not pending:
            return
        for label in pending:
            label.known_at = label_known_at(
                labelled_at=label.labelled_at,
                received_at=label.received_at,
                predicted_at=label.predicted_at,  # type: ignore[attr-defined]  # annotated above
                prediction_received_at=label.prediction_received_at,  # type: ignore[attr-defined]
            )
        GroundTruth.objects.bulk_update(pending, ["known_at"], batch_size=1000)


# Known times are computed in the query (label_known_at, in SQL) and written with the fed flag in
# one UPDATE after the pass: settling them first was a second write of every label (500,000
# labels: 9 s of the feed's 22 s).
_UNFED_POSTGRES = """
SELECT g.id, g.sample_id, g.label::text, p.prediction::text, k.known
  FROM {labels} AS g
  JOIN {samples} AS p ON p.model_id = g.model_id AND p.sample_id = g.sample_id
 CROSS JOIN LATERAL (SELECT COALESCE(
         g.known_at, g.labelled_at,
         GREATEST(p.timestamp, LEAST(g.received_at, g.received_at - (p.received_at - p.timestamp))))) AS k(known)
 WHERE g.model_id = %s AND NOT g.fed_to_detector AND k.known <= %s AND p.prediction IS NOT NULL
 ORDER BY k.known, g.id
"""


def _unfed_rows(
    model: RegisteredModel, known_by: datetime
) -> Iterator[tuple[int, str, Any, Any, datetime | None]]:
    """(label id, sample id, label, prediction, known time) of `_unfed`, streamed. PostgreSQL: one
    join on a server-side cursor (a sample id is unique per model, so each label meets at most one
    prediction) instead of two correlated look-ups per label (500,000 labels: 20 s of 33), the known
    time computed in it for `_mark_fed` to store. Elsewhere the known times are settled first, in
    the database (`_settle_known_times`), and come back as None."""
    if connection.vendor != "postgresql":
        _settle_known_times(model)
        for label_id, sample_id, label, predicted in _unfed(model, known_by).iterator(chunk_size=FEED_CHUNK):
            yield label_id, sample_id, label, predicted, None  # settled already
        return
    sql = _UNFED_POSTGRES.format(labels=GroundTruth._meta.db_table, samples=PredictionSample._meta.db_table)
    with connection.chunked_cursor() as cursor:
        cursor.execute(sql, [model.pk, known_by])
        while rows := cursor.fetchmany(FEED_CHUNK):
            for label_id, sample_id, label, predicted, known in rows:
                yield label_id, sample_id, orjson.loads(label), orjson.loads(predicted), known


def _unfed(model: RegisteredModel, known_by: datetime) -> Any:
    """Labels not fed yet whose prediction is in, known by `known_by`, in the order they became known."""
    return (
        GroundTruth.objects.filter(model=model, fed_to_detector=False, known_at__lte=known_by)
        .annotate(predicted=_prediction(model, "prediction", JSONField()))
        .filter(predicted__isnull=False)
        .order_by("known_at", "id")
        .values_list("id", "sample_id", "label", "predicted")
    )


def _mark_fed(ids: list[int], known: list[datetime | None]) -> None:
    """PostgreSQL: one UPDATE with the ids and their known times as two arrays (a hundred IN lists
    of 5,000 parameters cost 6 s of Django and driver work at 500,000 labels); else chunks of
    FEED_CHUNK (the known times were settled before the pass)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                f"""
                UPDATE {GroundTruth._meta.db_table} AS g SET fed_to_detector = true, known_at = v.known
                  FROM unnest(%s::bigint[], %s::timestamptz[]) AS v(id, known) WHERE g.id = v.id
                """,  # noqa: S608 (the model's table)
                [ids, known],
            )
        return
    for start in range(0, len(ids), FEED_CHUNK):
        GroundTruth.objects.filter(pk__in=ids[start : start + FEED_CHUNK]).update(fed_to_detector=True)


def detector_feed(*, model: RegisteredModel, known_by: datetime) -> DetectorUpdate:
    """Feed every new label to the model's detector; call inside the check's transaction."""
    row, _ = SequentialDetector.objects.get_or_create(model=model)
    row = SequentialDetector.objects.select_for_update().get(pk=row.pk)  # one feeder at a time
    detector = pickle.loads(bytes(row.state)) if row.state else _new_detector()  # noqa: S301 (our own state)
    update = DetectorUpdate(total=row.fed)
    # One ordered pass, streamed: re-running the ordered query per chunk of 5,000 made the database
    # look up every remaining label's prediction again each time (500,000 labels: 147 s, now a few).
    # The labels are marked fed after the pass (SQLite's cursor does not isolate writes to the
    # table it is reading), in the same transaction as the detector's new state.
    fed: list[int] = []
    known: list[datetime | None] = []
    for label_id, sample_id, label, predicted, known_at in _unfed_rows(model, known_by):
        before = detector.estimation
        detector.update(_error(model, predicted, label))
        fed.append(label_id)
        known.append(known_at)
        if detector.drift_detected and detector.estimation > before:
            update.detections.append(
                {
                    "sample_id": sample_id,
                    "label_number": row.fed + len(fed),
                    "error_before": before,
                    "error_after": detector.estimation,
                    "window": int(detector.width),
                }
            )
    _mark_fed(fed, known)
    update.fed = len(fed)
    update.total = row.fed + update.fed
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
