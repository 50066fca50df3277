"""The columnar write path: a request's samples as one part per hour, then its index rows.

The parts are written before the transaction; the SamplePart rows and the index rows commit
together in it, so a check (which reads only committed parts, masked to indexed rows) never sees
a payload whose index row did not commit. A file whose request then failed has no SamplePart row:
``collect.parts_collect`` deletes it after a grace.
"""

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial

import numpy as np
import orjson
import pandas as pd
import pyarrow as pa
from django.conf import settings
from django.core.files.storage import default_storage
from django.db import connection, transaction

from monitoring.models import PredictionSample, SamplePart
from monitoring.store.columns import ColumnChunk
from monitoring.store.parts import part_schema, part_write, samples_batch
from monitoring.validation import CleanSample
from registry.models import RegisteredModel
from registry.schema import Schema

Records = list[tuple[int | None, CleanSample]]  # (version id, sample), in the global id order


@dataclass
class _Index:
    """The index rows of a request, in the order they are inserted (by sample id)."""

    versions: list[int | None] = field(default_factory=list)
    sample_ids: list[str] = field(default_factory=list)
    times: list[datetime] = field(default_factory=list)
    predictions: list[str] = field(default_factory=list)

    def add(self, records: Records) -> None:
        for version, s in records:
            self.versions.append(version)
            self.sample_ids.append(s.sample_id)
            self.times.append(s.timestamp)
            self.predictions.append(orjson.dumps(s.prediction).decode())


def samples_store(*, model: RegisteredModel, schema: Schema, chunks: Iterable[Records], now: datetime) -> int:
    """Write the request's parts, then its index rows in one transaction → samples accepted."""
    arrow = part_schema(schema)
    index = _Index()
    batches = []
    for records in chunks:
        index.add(records)
        batches.append(samples_batch(schema, arrow, [s for _, s in records], [v for v, _ in records]))
    return _table_store(model, pa.Table.from_batches(batches, arrow), index, now)


def columns_store(
    *,
    model: RegisteredModel,
    schema: Schema,
    chunks: list[ColumnChunk],
    version_ids: dict[int | None, int | None],
    now: datetime,
) -> int:
    """``samples_store`` for a request validated a column at a time (``columns_clean``): its
    first row of each id, in the id order, then the same parts and index rows."""
    arrow = part_schema(schema)
    table = pa.Table.from_batches([c.batch(arrow, version_ids) for c in chunks], arrow)
    sample_ids = [s for c in chunks for s in c.sample_ids]
    order = first_rows_by_id(sample_ids)
    times = [t for c in chunks for t in c.times]
    versions = [version_ids[v] for c in chunks for v in c.versions]
    predictions = [js for c in chunks for js in c.prediction_json]
    index = _Index(
        versions=[versions[i] for i in order],
        sample_ids=[sample_ids[i] for i in order],
        times=[times[i] for i in order],
        predictions=[predictions[i] for i in order],
    )
    return _table_store(model, table.take(order), index, now)


def first_rows_by_id(sample_ids: list[str]) -> list[int]:
    """Each id's first row, in the order of the ids: every transaction inserts in this one global
    order, so two overlapping batches wait on each other in it and cannot deadlock."""
    first: dict[str, int] = {}
    for i, sample_id in enumerate(sample_ids):
        first.setdefault(sample_id, i)
    return [first[k] for k in sorted(first)]


def _table_store(model: RegisteredModel, table: pa.Table, index: _Index, now: datetime) -> int:
    written, part_of, row_in = hour_parts_write(model, table)
    with transaction.atomic():
        parts = parts_create(model, written, now)
        part_ids = [parts[k].pk for k in part_of]
        insert = _insert_index_postgres if connection.vendor == "postgresql" else _insert_index_generic
        rows = row_in.tolist()
        counts: Counter[int] = Counter()
        for start in range(0, len(table), 1000):
            counts.update(insert(model, index, part_ids, rows, slice(start, start + 1000), now))
        for part in parts:
            part_settle(part, counts[part.pk])
    return sum(counts.values())


Written = list[tuple[str, datetime, np.ndarray, int]]  # (file name, hour, its rows in the table, bytes)


def hour_parts_write(model: RegisteredModel, table: pa.Table) -> tuple[Written, np.ndarray, np.ndarray]:
    """One part file per hour of the table's timestamps → the files, and for each row of the
    table which of them holds it (an index in the files) at which row."""
    hours = table.column("timestamp").to_numpy().astype("datetime64[h]")
    written = [_write_hour(model, table, hours, hour) for hour in np.unique(hours)]
    part_of = np.empty(len(table), dtype="int64")
    row_in = np.empty(len(table), dtype="int64")
    for k, (_, _, rows, _) in enumerate(written):
        part_of[rows] = k
        row_in[rows] = np.arange(len(rows))
    return written, part_of, row_in


def parts_create(model: RegisteredModel, written: Written, now: datetime) -> list[SamplePart]:
    """The files' SamplePart rows (nothing indexed yet): call inside the index's transaction."""
    return [
        SamplePart.objects.create(
            model=model, bucket=bucket, name=name, rows=len(rows), indexed=0, size=size, created_at=now
        )
        for name, bucket, rows, size in written
    ]


def _write_hour(
    model: RegisteredModel, table: pa.Table, hours: np.ndarray, hour: np.datetime64
) -> tuple[str, datetime, np.ndarray, int]:
    rows = np.flatnonzero(hours == hour)
    bucket = pd.Timestamp(hour).tz_localize("UTC").to_pydatetime()
    name, size = part_write(model_id=model.pk, bucket=bucket, table=table.take(rows))
    return name, bucket, rows, size


def part_settle(part: SamplePart, indexed: int) -> None:
    """Record how many of the part's rows are indexed; a part of nothing but duplicates (a
    retry) is dropped, its file deleted once the drop commits."""
    if indexed:
        SamplePart.objects.filter(pk=part.pk).update(indexed=indexed)
        return
    part.delete()
    transaction.on_commit(partial(default_storage.delete, part.name))


_INSERT_INDEX_SQL = """
INSERT INTO monitoring_predictionsample
    (model_id, version_id, sample_id, timestamp, received_at, features, prediction, part_id, part_row)
SELECT %s, u.v, u.s, u.t, %s, '{}'::jsonb, u.p, u.pa, u.r
FROM unnest(%b::bigint[], %b::text[], %b::timestamptz[], %b::text[]::jsonb[], %b::bigint[],
            %b::integer[]) AS u(v, s, t, p, pa, r)
ON CONFLICT (model_id, sample_id) DO NOTHING
RETURNING part_id
"""


def _insert_index_postgres(
    model: RegisteredModel, index: _Index, parts: list[int], rows: list[int], at: slice, now: datetime
) -> Counter[int]:
    """One statement per chunk; ON CONFLICT makes concurrent retries safe → inserted per part."""
    import psycopg  # PostgreSQL only: the SQLite default never loads the driver

    params = (
        model.pk,
        now,
        index.versions[at],
        index.sample_ids[at],
        index.times[at],
        index.predictions[at],
        parts[at],
        rows[at],
    )
    connection.ensure_connection()
    with psycopg.Cursor(connection.connection) as cursor:
        cursor.execute(_INSERT_INDEX_SQL, params)
        return Counter(part for (part,) in cursor.fetchall())


def _insert_index_generic(
    model: RegisteredModel, index: _Index, parts: list[int], rows: list[int], at: slice, now: datetime
) -> Counter[int]:
    # SQLite runs the transaction as IMMEDIATE: no writer slips in between this read and the insert.
    ids = index.sample_ids[at]
    existing = set(
        PredictionSample.objects.filter(model=model, sample_id__in=ids).values_list("sample_id", flat=True)
    )
    new: list[PredictionSample] = []
    for version, sample_id, ts, prediction, part, row in zip(
        index.versions[at], ids, index.times[at], index.predictions[at], parts[at], rows[at], strict=True
    ):
        if sample_id not in existing:
            new.append(_index_row(model, version, sample_id, ts, prediction, part, row, now))
    PredictionSample.objects.bulk_create(new, batch_size=500)
    return Counter(part for row in new if (part := row.part_id) is not None)


def _index_row(
    model: RegisteredModel,
    version: int | None,
    sample_id: str,
    ts: datetime,
    prediction: str,
    part: int,
    row: int,
    now: datetime,
) -> PredictionSample:
    return PredictionSample(
        model=model,
        version_id=version,
        sample_id=sample_id,
        timestamp=ts,
        received_at=now,
        features={},
        prediction=orjson.loads(prediction),
        part_id=part,
        part_row=row,
    )


def store_is_columnar() -> bool:
    """Predictions go to the columnar store when checks read from it (one setting for both)."""
    return bool(settings.DRIFTWATCH_SAMPLE_SOURCE == "columnar")
