"""Writes for monitoring: prediction and label ingestion (all-or-nothing, idempotent)."""

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from core.audit import Actor, audit_record
from core.batch import RowList, Rows, RowSpans, chunked_rows, chunks
from core.metrics import ingest_counted
from monitoring.models import GroundTruth, MonitoringPolicy
from monitoring.pg import server_cursor
from monitoring.policy import default_metric, policy_update
from monitoring.sequential import NewLabel, Predicted, backlog_queue, backlog_refresh, label_predictions
from monitoring.store.columns import columns_clean
from monitoring.store.ingest import columns_store, samples_store
from monitoring.validation import CleanLabel, CleanSample, SampleCleaner, clean_label, require_list
from registry.models import ModelVersion, RegisteredModel, VersionStatus
from registry.schema import Collector, model_schema


@dataclass(frozen=True)
class IngestResult:
    accepted: int
    duplicates: int


@dataclass(frozen=True)
class LabelResult:
    matched: int
    pending: int


def _batch_rows(body: Any, key: str) -> Rows:
    """A view's batch arrives as raw spans (core.api.json_batch); a plain body is checked here."""
    if isinstance(body, RowSpans):
        return body
    return RowList(require_list(body, key, max_rows=settings.DRIFTWATCH_MAX_BATCH_ROWS))


@ingest_counted("predictions", lambda r: (r.accepted, r.duplicates))
def predictions_ingest(*, model: RegisteredModel, body: Any) -> IngestResult:
    """Validate the whole batch first, then store it in one transaction (or nothing).

    Both passes read the rows a chunk at a time (core.batch), so one chunk of objects is alive
    at once; between them only each id's first row index is kept.
    """
    rows = _batch_rows(body, "samples")
    version_ids = dict(ModelVersion.objects.filter(model=model).values_list("version", "pk"))
    now = timezone.now()
    cleaner = SampleCleaner.for_schema(model_schema(model), versions=set(version_ids), now=now)
    if (columns := columns_clean(rows, cleaner)) is not None:
        versions: dict[int | None, int | None] = {v: pk for v, pk in version_ids.items()}
        versions[None] = _champion(model)
        inserted = columns_store(
            model=model, schema=cleaner.schema, chunks=columns, version_ids=versions, now=now
        )
        return IngestResult(accepted=inserted, duplicates=len(rows) - inserted)
    # The row path: a request the columns' tests did not pass (it names every bad row and field,
    # or stores a shape they leave to it).
    errors = Collector()
    first_row: dict[str, int] = {}
    kept = _KeptSamples(rows)
    for i, raw in chunked_rows(rows):
        sample = cleaner.clean(raw, i, errors)
        if sample is not None:
            first_row.setdefault(sample.sample_id, i)
            kept.add(i, sample)
    errors.raise_if_any()
    champion = _champion(model)
    # One global insertion order (by id) for every transaction: two overlapping batches then wait
    # on each other in the same order and cannot deadlock on the unique index.
    order = [first_row[k] for k in sorted(first_row)]
    del first_row

    def records() -> Iterator[list[tuple[int | None, CleanSample]]]:
        for chunk in chunks(order):
            again = [i for i in chunk if i not in kept.rows]  # past the kept rows: decoded and cleaned again
            cleaned = {
                i: _valid(cleaner.clean(raw, i, errors))
                for i, raw in zip(again, rows.load(again), strict=True)
            }
            samples = [kept.rows.pop(i) if i in kept.rows else cleaned[i] for i in chunk]
            yield [(version_ids[s.version] if s.version is not None else champion, s) for s in samples]

    inserted = samples_store(model=model, schema=cleaner.schema, chunks=records(), now=now)
    return IngestResult(accepted=inserted, duplicates=len(rows) - inserted)


def _champion(model: RegisteredModel) -> int | None:
    """The version a sample sent without one is attributed to."""
    return (
        ModelVersion.objects.filter(model=model, status=VersionStatus.CHAMPION)
        .values_list("pk", flat=True)
        .first()
    )


# The first pass keeps its cleaned samples while they take about this much memory, and at most
# KEEP_BODY_TIMES the request body's bytes (an accepted batch stays within a few times its
# size: tests/platform/monitoring/test_batch_memory.py, 7.2x of its 8x bound at 2, 7.9-8.6x at
# 3): the rows kept are stored without
# being decoded and cleaned a second time (cleaning was 60% of a 10,000-sample batch's time,
# done twice); the rest are decoded and cleaned again, as before.
KEEP_BYTES = 32 * 2**20
KEEP_BODY_TIMES = 2


class _KeptSamples:
    """The first pass's cleaned samples by row, the first rows' up to the budget."""

    def __init__(self, rows: Rows) -> None:
        self.rows: dict[int, CleanSample] = {}
        self.left = KEEP_BYTES
        if isinstance(rows, RowSpans):
            self.left = min(self.left, KEEP_BODY_TIMES * sum(len(span) for span in rows.spans))

    def add(self, row: int, sample: CleanSample) -> None:
        if self.left <= 0:
            return
        self.left -= _footprint(sample)
        if self.left >= 0:
            self.rows[row] = sample


def _footprint(sample: CleanSample) -> int:
    """About the bytes a cleaned sample holds: its objects, each feature's key and value (a
    vector's floats, a text's characters) and its probabilities."""
    size = 400 + 80 * len(sample.probabilities or ())
    for value in sample.features.values():
        size += 80 + (
            32 * len(value) if isinstance(value, list) else len(value) if isinstance(value, str) else 0
        )
    return size


def _valid(sample: CleanSample | None) -> CleanSample:
    """A row of the second pass: the first found it valid."""
    if sample is None:
        raise AssertionError("a row valid in the first pass is invalid in the second")
    return sample


@ingest_counted("labels", lambda r: (r.matched + r.pending, 0))
def labels_ingest(*, model: RegisteredModel, body: Any) -> LabelResult:
    """Store labels (a repeated id overwrites its label); report how many met their prediction.

    Read in chunks like the predictions: validated whole first, keeping each id's last row index.
    """
    rows = _batch_rows(body, "labels")
    now = timezone.now()
    schema = model_schema(model)
    lookup = schema.class_lookup()
    errors = Collector()
    last_row: dict[str, int] = {}
    for i, raw in chunked_rows(rows):
        cleaned = clean_label(raw, i, errors, schema, lookup, now)
        if cleaned is not None:
            last_row[cleaned[0]] = i
    errors.raise_if_any()
    # Sorted by id, like the predictions: a fixed lock order, so overlapping upserts cannot deadlock.
    order = [last_row[k] for k in sorted(last_row)]
    del last_row
    matched = 0
    with transaction.atomic():
        for chunk in chunks(order):
            labels = [
                _valid_label(clean_label(raw, i, errors, schema, lookup, now))
                for i, raw in zip(chunk, rows.load(chunk), strict=True)
            ]
            predictions = label_predictions(model=model, sample_ids=[sample_id for sample_id, _ in labels])
            inserted = _labels_insert_new(model, labels, now, predictions)
            # Only a label stored for the first time waits for the detector: one sent again is
            # queued still, or was fed already (and is never fed twice).
            backlog_queue(
                model=model,
                labels=[
                    NewLabel(inserted[sample_id], sample_id, label.label, now, label.labelled_at)
                    for sample_id, label in labels
                    if sample_id in inserted
                ],
                predictions=predictions,
            )
            resent = GroundTruth.objects.bulk_create(
                [
                    GroundTruth(
                        model=model,
                        sample_id=sample_id,
                        label=label.label,
                        received_at=now,
                        labelled_at=label.labelled_at,
                        sample_at=_predicted_at(predictions, sample_id),
                    )
                    for sample_id, label in labels
                    if sample_id not in inserted
                ],
                batch_size=1000,
                update_conflicts=True,
                unique_fields=["model", "sample_id"],
                update_fields=["label", "received_at", "labelled_at", "sample_at"],
            )
            backlog_refresh(
                model=model,
                labels=[NewLabel(g.pk, g.sample_id, g.label, g.received_at, g.labelled_at) for g in resent],
                predictions=predictions,
            )
            matched += len(predictions)
    return LabelResult(matched=matched, pending=len(order) - matched)


LABEL_INSERT_ROWS = 500  # 6 parameters a row: well under SQLite's cap on bound variables


def _predicted_at(predictions: Mapping[str, Predicted], sample_id: str) -> datetime | None:
    """The label's ``sample_at``: its prediction's timestamp, None while the prediction is not in."""
    found = predictions.get(sample_id)
    return None if found is None else found[1]


def _labels_insert_new(
    model: RegisteredModel,
    labels: list[tuple[str, CleanLabel]],
    now: datetime,
    predictions: Mapping[str, Predicted],
) -> dict[str, int]:
    """Insert the labels not stored yet; {sample id: label id} of those it inserted. ON CONFLICT DO
    NOTHING RETURNING names exactly the rows this statement created (a concurrent request's row
    waits for it and conflicts), so a label is queued for the detector once, by its creator."""
    if connection.vendor == "postgresql":
        return _labels_insert_postgres(model, labels, now, predictions)
    table, fields = GroundTruth._meta.db_table, GroundTruth._meta
    label_field, time_field = fields.get_field("label"), fields.get_field("received_at")
    inserted: dict[str, int] = {}
    with connection.cursor() as cursor:
        for start in range(0, len(labels), LABEL_INSERT_ROWS):
            batch = labels[start : start + LABEL_INSERT_ROWS]
            params: list[Any] = []
            for sample_id, label in batch:
                params += [
                    model.pk,
                    sample_id,
                    label_field.get_db_prep_save(label.label, connection),
                    time_field.get_db_prep_save(now, connection),
                    time_field.get_db_prep_save(label.labelled_at, connection),
                    time_field.get_db_prep_save(_predicted_at(predictions, sample_id), connection),
                ]
            values = ", ".join(["(%s, %s, %s, %s, %s, %s)"] * len(batch))
            cursor.execute(
                f"INSERT INTO {table} (model_id, sample_id, label, received_at, labelled_at, sample_at) VALUES {values} "  # noqa: S608 (our table; values are parameters)
                "ON CONFLICT (model_id, sample_id) DO NOTHING RETURNING sample_id, id",
                params,
            )
            inserted.update(cursor.fetchall())
    return inserted


_LABELS_INSERT_POSTGRES = """
INSERT INTO monitoring_groundtruth (model_id, sample_id, label, received_at, labelled_at, sample_at)
SELECT %s, u.s, u.v::jsonb, %s, u.la, u.sa
FROM unnest(%b::text[], %b::text[], %b::timestamptz[], %b::timestamptz[]) AS u(s, v, la, sa)
ON CONFLICT (model_id, sample_id) DO NOTHING RETURNING sample_id, id
"""


def _labels_insert_postgres(
    model: RegisteredModel,
    labels: list[tuple[str, CleanLabel]],
    now: datetime,
    predictions: Mapping[str, Predicted],
) -> dict[str, int]:
    """One statement with array parameters, bound by the server: 10,000 labels as 20 statements
    of 500 rows' parameters spent 0.69 s (each statement's text too long for psycopg's cache, so
    parsed again, and every value prepared by its Django field)."""
    params = (
        model.pk,
        now,
        [sample_id for sample_id, _ in labels],
        [orjson.dumps(label.label).decode() for _, label in labels],
        [label.labelled_at for _, label in labels],
        [_predicted_at(predictions, sample_id) for sample_id, _ in labels],
    )
    with server_cursor() as cursor:
        cursor.execute(_LABELS_INSERT_POSTGRES, params)
        return dict(cursor.fetchall())


def _valid_label(cleaned: tuple[str, CleanLabel] | None) -> tuple[str, CleanLabel]:
    """A label of the second pass: the first found it valid."""
    if cleaned is None:
        raise AssertionError("a label valid in the first pass is invalid in the second")
    return cleaned


def policy_ensure(*, model: RegisteredModel) -> MonitoringPolicy:
    """The model's stored policy, created with the defaults (the metric that fits its task)."""
    policy, _ = MonitoringPolicy.objects.get_or_create(
        model=model, defaults={"metric": default_metric(model.task)}
    )
    return policy


def policy_change(*, model: RegisteredModel, changes: Any, actor: Actor) -> MonitoringPolicy:
    """Validate, store and audit a change to the model's policy: the API's PATCH and the
    dashboard's form both come here. A rejected change raises InvalidInput and stores nothing,
    not even the default policy it would have been applied to."""
    with transaction.atomic():
        policy = policy_update(policy=policy_ensure(model=model), changes=changes)
        audit_record(actor=actor, action="policy.update", target=policy, details={"changes": changes})
    return policy
