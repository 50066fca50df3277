"""The columnar write path: a request's samples as one part per hour, then its index rows.

The parts are written before the transaction; the SamplePart rows and the index rows commit
together in it, so a check (which reads only committed parts, masked to indexed rows) never sees
a payload whose index row did not commit. A file whose request then failed has no SamplePart row:
``collect.parts_collect`` deletes it after a grace.
"""

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial

import numpy as np
import orjson
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from django.core.files.storage import default_storage
from django.db import connection, transaction

from monitoring.models import PredictionSample, SamplePart
from monitoring.pg import server_cursor
from monitoring.store import pgcopy
from monitoring.store.columns import ColumnChunk
from monitoring.store.parts import part_schema, part_write, samples_batch
from monitoring.validation import CleanSample
from registry.models import RegisteredModel
from registry.schema import Schema

Records = list[tuple[int | None, CleanSample]]  # (version id, sample), in the global id order


def samples_store(*, model: RegisteredModel, schema: Schema, chunks: Iterable[Records], now: datetime) -> int:
    """Write the request's parts, then its index rows in one transaction → samples accepted."""
    arrow = part_schema(schema)
    predictions: list[str] = []
    batches = []
    for records in chunks:
        predictions += [orjson.dumps(s.prediction).decode() for _, s in records]
        batches.append(samples_batch(schema, arrow, [s for _, s in records], [v for v, _ in records]))
    return _table_store(model, pa.Table.from_batches(batches, arrow), predictions, now)


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
    order = first_rows_by_id([s for c in chunks for s in c.sample_ids])
    predictions = [js for c in chunks for js in c.prediction_json]
    return _table_store(model, table.take(order), [predictions[i] for i in order], now)


def first_rows_by_id(sample_ids: list[str]) -> list[int]:
    """Each id's first row, in the order of the ids: every transaction inserts in this one global
    order, so two overlapping batches wait on each other in it and cannot deadlock."""
    first: dict[str, int] = {}
    for i, sample_id in enumerate(sample_ids):
        first.setdefault(sample_id, i)
    return [first[k] for k in sorted(first)]


def _table_store(model: RegisteredModel, table: pa.Table, predictions: list[str], now: datetime) -> int:
    """The table's rows (in the id order) as parts, then their index rows in one transaction."""
    written, part_of, row_in = hour_parts_write(model, table)
    with transaction.atomic():
        parts = parts_create(model, written, now)
        part_ids = np.array([part.pk for part in parts], dtype="int64")[part_of]
        index = _Index(table, predictions, part_ids, row_in)
        insert = _insert_index_postgres if connection.vendor == "postgresql" else _insert_index_generic
        counts = insert(model, index, now)
        for part in parts:
            part_settle(part, counts[part.pk])
    return sum(counts.values())


@dataclass(frozen=True)
class _Index:
    """A request's index rows, in the order they are inserted (by sample id)."""

    table: pa.Table  # the part columns, of which the index takes sample_id, timestamp, version_id
    predictions: list[str]  # each prediction's JSON
    parts: np.ndarray  # the part (its id) that holds each row's payload
    rows: np.ndarray  # and the row in it

    def __len__(self) -> int:
        return len(self.predictions)

    def take(self, rows: np.ndarray) -> "_Index":
        """These rows only, in this order."""
        return _Index(
            self.table.take(pa.array(rows, pa.int64())),
            [self.predictions[i] for i in rows.tolist()],
            self.parts[rows],
            self.rows[rows],
        )

    def values(
        self, at: slice
    ) -> tuple[list[int | None], list[str], list[datetime], list[str], list[int], list[int]]:
        """Rows ``at`` as Python values (versions, sample ids, times, predictions, parts, rows):
        a statement's parameters, built a chunk at a time (a datetime a row)."""
        table = self.table.slice(at.start, at.stop - at.start)
        return (
            table.column("version_id").to_pylist(),
            table.column("sample_id").to_pylist(),
            table.column("timestamp").to_pylist(),
            self.predictions[at],
            self.parts[at].tolist(),
            self.rows[at].tolist(),
        )


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
    (model_id, version_id, sample_id, timestamp, received_at, prediction, part_id, part_row)
SELECT %s, u.v, u.s, u.t, %s, u.p, u.pa, u.r
FROM unnest(%b::bigint[], %b::text[], %b::timestamptz[], %b::text[]::jsonb[], %b::bigint[],
            %b::integer[]) AS u(v, s, t, p, pa, r)
ON CONFLICT (model_id, sample_id) DO NOTHING
RETURNING part_id
"""
_COPY_INDEX_SQL = """
COPY monitoring_predictionsample
    (model_id, version_id, sample_id, timestamp, received_at, prediction, part_id, part_row)
FROM STDIN (FORMAT BINARY)
"""
INSERT_CHUNK = 1000  # rows a statement when some id may be stored already
COPY_CHUNK = 10_000  # rows assembled at a time: a large request's stream is not held whole


def _insert_index_postgres(model: RegisteredModel, index: _Index, now: datetime) -> Counter[int]:
    """One binary COPY while no id of the request is stored (its first send: 0.05 s of PostgreSQL
    for 10,000 rows, against 0.07 s with ON CONFLICT); a stored id (a retry, or a concurrent
    request's, which the COPY waits for) makes it fail, its savepoint undone, and the rows go again
    with ON CONFLICT DO NOTHING, which skips them → rows inserted per part."""
    import psycopg  # PostgreSQL only: the SQLite default never loads the driver

    try:
        with transaction.atomic(), server_cursor() as cursor:
            with cursor.copy(_COPY_INDEX_SQL) as copy:
                copy.write(pgcopy.HEADER)
                for start in range(0, len(index), COPY_CHUNK):
                    copy.write(_index_copy_rows(model, index, slice(start, start + COPY_CHUNK), now))
                copy.write(pgcopy.TRAILER)
    except psycopg.errors.UniqueViolation:
        return _insert_index_unstored(model, index, now)
    parts, inserted = np.unique(index.parts, return_counts=True)
    return Counter(dict(zip(parts.tolist(), inserted.tolist(), strict=True)))


_STORED_IDS_SQL = """
SELECT sample_id FROM monitoring_predictionsample WHERE model_id = %s AND sample_id = ANY(%b::text[])
"""


def _insert_index_unstored(model: RegisteredModel, index: _Index, now: datetime) -> Counter[int]:
    """After the COPY met a stored id: the request's stored ids are looked up in one statement,
    and only the others go in, with ON CONFLICT DO NOTHING (a concurrent request's uncommitted
    row is not seen by the lookup: the insert waits for it and skips it) → rows inserted per
    part. A whole request sent again then inserts nothing: 10,000 ids 0.15 s in-process through
    the API (a new request's 0.11-0.18 s), against 0.23 s when every row went again with ON
    CONFLICT."""
    ids = index.table.column("sample_id")
    with server_cursor() as cursor:
        cursor.execute(_STORED_IDS_SQL, (model.pk, ids.to_pylist()), binary=True)
        stored = pa.array([sample_id for (sample_id,) in cursor], pa.string())
    unstored = index.take(np.flatnonzero(~pc.is_in(ids, value_set=stored).to_numpy(zero_copy_only=False)))
    counts: Counter[int] = Counter()
    for start in range(0, len(unstored), INSERT_CHUNK):
        counts.update(_insert_index_on_conflict(model, unstored, slice(start, start + INSERT_CHUNK), now))
    return counts


def _index_copy_rows(model: RegisteredModel, index: _Index, at: slice, now: datetime) -> memoryview:
    table = index.table.slice(at.start, at.stop - at.start)
    n, versions = len(table), table.column("version_id")
    received = (now - pgcopy.PG_EPOCH) // timedelta(microseconds=1)
    return pgcopy.copy_rows(
        [
            pgcopy.integers(np.full(n, model.pk), ">i8"),
            pgcopy.integers(versions.fill_null(0).to_numpy(), ">i8", null=versions.is_null().to_numpy()),
            pgcopy.texts(table.column("sample_id")),
            pgcopy.timestamps(table.column("timestamp")),
            pgcopy.constant(received.to_bytes(8, "big", signed=True), n),
            pgcopy.texts(pa.array(index.predictions[at], pa.string()), pgcopy.JSONB_VERSION),
            pgcopy.integers(index.parts[at], ">i8"),
            pgcopy.integers(index.rows[at], ">i4"),
        ]
    )


def _insert_index_on_conflict(
    model: RegisteredModel, index: _Index, at: slice, now: datetime
) -> Counter[int]:
    """One statement per chunk; ON CONFLICT makes concurrent retries safe → inserted per part."""
    params = (model.pk, now, *index.values(at))
    with server_cursor() as cursor:
        cursor.execute(_INSERT_INDEX_SQL, params)
        return Counter(part for (part,) in cursor.fetchall())


def _insert_index_generic(model: RegisteredModel, index: _Index, now: datetime) -> Counter[int]:
    # SQLite runs the transaction as IMMEDIATE: no writer slips in between this read and the insert.
    counts: Counter[int] = Counter()
    for start in range(0, len(index), INSERT_CHUNK):
        versions, ids, times, predictions, parts, rows = index.values(slice(start, start + INSERT_CHUNK))
        existing = set(
            PredictionSample.objects.filter(model=model, sample_id__in=ids).values_list(
                "sample_id", flat=True
            )
        )
        new = [
            _index_row(model, version, sample_id, ts, prediction, part, row, now)
            for version, sample_id, ts, prediction, part, row in zip(
                versions, ids, times, predictions, parts, rows, strict=True
            )
            if sample_id not in existing
        ]
        PredictionSample.objects.bulk_create(new, batch_size=500)
        counts.update(row.part_id for row in new if row.part_id is not None)
    return counts


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
        prediction=orjson.loads(prediction),
        part_id=part,
        part_row=row,
    )
