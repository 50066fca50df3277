"""Moving samples stored as JSON rows (the store before the columnar one) into the columnar store.

An install upgraded from before the columnar store holds them as index rows without a part, their
payload in the ``features`` and ``probabilities`` JSON columns. Migration 0030 keeps those columns
(nullable); 0031 drops them, and refuses while any such row is left. In between, this reads
them in SQL (the model no longer has the fields).

Resumable: each batch of rows is written as parts, read back and compared, then its rows are
repointed in one transaction that only takes rows still without a part; a kill leaves either a
moved batch or orphan files (``collect`` deletes them) and unmoved rows the next run takes.
"""

import hashlib
import logging
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NamedTuple

import orjson
import pyarrow as pa
from django.db import connection, transaction
from django.utils import timezone

from monitoring.models import PredictionSample
from monitoring.pg import server_cursor
from monitoring.store.ingest import hour_parts_write, part_settle, parts_create
from monitoring.store.parts import part_read, part_schema, samples_batch
from monitoring.store.source import window_parts
from monitoring.validation import CleanSample
from registry.models import RegisteredModel
from registry.schema import model_schema

logger = logging.getLogger(__name__)
BATCH = 10_000
END_OF_TIME = datetime(9999, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class StoreCounts:
    """One model's samples after a move: the index rows pointing into parts, the rows still in
    JSON, the rows the live parts say they hold, and checksums of the sample ids on each side."""

    indexed: int
    unmoved: int
    in_parts: int
    index_checksum: str
    parts_checksum: str

    @property
    def consistent(self) -> bool:
        return self.indexed == self.in_parts and self.index_checksum == self.parts_checksum


def samples_move(*, model: RegisteredModel, batch: int = BATCH, now: datetime | None = None) -> int:
    """Move every JSON row of the model into parts, batch by batch → rows moved."""
    moved = 0
    while True:
        n = _move_batch(model, batch, now or timezone.now())
        if n == 0:
            return moved
        moved += n


LEGACY_COLUMNS = {"features", "probabilities"}
# Rows read a statement on SQLite (its cap on bound variables).
PAYLOAD_IDS = 5000


class NoPayload(Exception):
    """Index rows without a part, and no JSON payload columns to move them from."""


class Unmoved(NamedTuple):
    """A row still stored as JSON: its index fields and its payload, decoded."""

    id: int
    sample_id: str
    timestamp: datetime
    version_id: int | None
    prediction: Any
    features: Any
    probabilities: Any


def legacy_columns() -> bool:
    """Whether the index table still has the JSON payload columns (before migration 0031)."""
    with connection.cursor() as cursor:
        described = connection.introspection.get_table_description(cursor, PredictionSample._meta.db_table)
    return LEGACY_COLUMNS <= {column.name for column in described}


# The oldest rows still without a part, on the partial index ``sample_unmoved`` (model, timestamp):
# a batch is one range of it, and an hour's rows come in few batches (by sample id, every batch
# sorted all the rows left and spread over every hour: 1M rows took 98 s).
_UNMOVED_SQL = """
SELECT id, sample_id, timestamp, version_id, prediction, features, probabilities
FROM monitoring_predictionsample WHERE model_id = %s AND part_id IS NULL
ORDER BY timestamp, id LIMIT %s
"""


def _unmoved(model: RegisteredModel, batch: int) -> list[Unmoved]:
    """The next ``batch`` rows to move, oldest first."""
    if connection.vendor == "postgresql":
        with server_cursor() as cursor:  # JSON decoded by orjson, parameters bound by the server
            cursor.execute(_UNMOVED_SQL, (model.pk, batch), binary=True)
            return [Unmoved(*row) for row in cursor.fetchall()]
    rows = list(
        PredictionSample.objects.filter(model=model, part__isnull=True)
        .order_by("timestamp", "id")
        .values_list("id", "sample_id", "timestamp", "version_id", "prediction")[:batch]
    )
    payloads = _payloads([row[0] for row in rows])
    return [Unmoved(*row, *payloads[row[0]]) for row in rows]


_PAYLOADS_SQL = "SELECT id, features, probabilities FROM monitoring_predictionsample WHERE id IN ({})"


def _payloads(ids: list[int]) -> dict[int, tuple[Any, Any]]:
    """The rows' features and probabilities, decoded from their JSON columns (SQLite)."""
    found: dict[int, tuple[Any, Any]] = {}
    with connection.cursor() as cursor:
        for start in range(0, len(ids), PAYLOAD_IDS):
            chunk = ids[start : start + PAYLOAD_IDS]
            cursor.execute(_PAYLOADS_SQL.format(", ".join(["%s"] * len(chunk))), chunk)
            found.update((row_id, (_json(f), _json(p))) for row_id, f, p in cursor.fetchall())
    return found


def _json(value: Any) -> Any:
    """A JSON column's value as the cursor hands it: text to decode (data only, never evaluated),
    or already decoded."""
    return orjson.loads(value) if isinstance(value, str | bytes) else value


def _move_batch(model: RegisteredModel, batch: int, now: datetime) -> int:
    if not legacy_columns():
        if PredictionSample.objects.filter(model=model, part__isnull=True).exists():
            raise NoPayload(
                f"model {model.name!r} has index rows without a part, and the JSON payload columns are gone"
            )
        return 0
    rows = _unmoved(model, batch)
    if not rows:
        return 0
    schema = model_schema(model)
    arrow = part_schema(schema)
    samples = [
        CleanSample(r.sample_id, r.timestamp, r.features or {}, r.prediction, r.probabilities, None)
        for r in rows
    ]
    table = pa.Table.from_batches([samples_batch(schema, arrow, samples, [r.version_id for r in rows])])
    written, part_of, row_in = hour_parts_write(model, table)
    for name, _, taken, _ in written:  # the storage's round trip, before any row points there
        if not part_read(name).equals(table.take(pa.array(taken))):
            raise RuntimeError(f"part {name} reads back different from what was written")
    logger.info("move: model=%s rows=%s wrote=%s parts", model.pk, len(rows), len(written))
    with transaction.atomic():
        parts = parts_create(model, written, now)
        counts = _repoint(rows, [parts[k].pk for k in part_of], row_in.tolist())
        for part in parts:
            part_settle(part, counts[part.pk])
    logger.info("move: model=%s repointed=%s", model.pk, sum(counts.values()))
    return sum(counts.values())


# The moved row's new version holds no payload (its columns go at 0031; until then the table
# does not carry both copies).
_REPOINT_SQL = """
UPDATE monitoring_predictionsample s SET part_id = u.p, part_row = u.r, features = NULL, probabilities = NULL
FROM unnest(%s::bigint[], %s::bigint[], %s::integer[]) AS u(id, p, r)
WHERE s.id = u.id AND s.part_id IS NULL
RETURNING s.part_id
"""


def _repoint(rows: list[Unmoved], parts: list[int], part_rows: list[int]) -> Counter[int]:
    """Point each row (still without a part) at its part's row, its JSON payload emptied."""
    if connection.vendor == "postgresql":
        with server_cursor() as cursor:
            cursor.execute(_REPOINT_SQL, ([r.id for r in rows], parts, part_rows), binary=True)
            return Counter(part for (part,) in cursor)
    counts: Counter[int] = Counter()
    with connection.cursor() as cursor:
        for row, part, part_row in zip(rows, parts, part_rows, strict=True):
            cursor.execute(
                "UPDATE monitoring_predictionsample SET part_id = %s, part_row = %s, features = NULL, "
                "probabilities = NULL WHERE id = %s AND part_id IS NULL",
                [part, part_row, row.id],
            )
            counts[part] += cursor.rowcount
    return counts


def store_counts(*, model: RegisteredModel) -> StoreCounts:
    """Counts and sample-id checksums of the model's index and of its live parts' indexed rows,
    each side read as a stream (a million ids are not held, nor sorted)."""
    index = _Checksum()
    rows = PredictionSample.objects.filter(model=model, part__isnull=False).values_list(
        "sample_id", flat=True
    )
    for sample_id in rows.iterator(chunk_size=CHECKSUM_CHUNK):
        index.add(sample_id)
    parts = _Checksum()
    for part in window_parts(model, None, END_OF_TIME):
        column = part_read(part.name, ["sample_id"]).column("sample_id")
        for sample_id in (
            column.to_pylist() if part.kept is None else column.take(pa.array(part.kept)).to_pylist()
        ):
            parts.add(sample_id)
    return StoreCounts(
        indexed=index.count,
        unmoved=PredictionSample.objects.filter(model=model, part__isnull=True).count(),
        in_parts=parts.count,
        index_checksum=index.hex,
        parts_checksum=parts.hex,
    )


CHECKSUM_CHUNK = 20_000


class _Checksum:
    """An order-free checksum of a multiset of sample ids: the sum, modulo 2^64, of each id's
    64-bit BLAKE2b digest, and their count. Two sides agree when they hold the same ids as many
    times each (an id missing on one side and another in its place differ but by chance 2^-64)."""

    def __init__(self) -> None:
        self.count = 0
        self.total = 0

    def add(self, sample_id: str) -> None:
        digest = hashlib.blake2b(sample_id.encode(), digest_size=8).digest()
        self.total = (self.total + int.from_bytes(digest, "big")) % 2**64
        self.count += 1

    @property
    def hex(self) -> str:
        return f"{self.total:016x}"
