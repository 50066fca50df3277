"""The columnar sample source: a window read from the parts its committed index rows point to.

One SQL statement lists the window's live parts (pruned by hour) together with the rows of the
parts that hold duplicates, so the list and its masks come from one snapshot (a compaction's
swap is one transaction: a window sees the old parts or the new one, never both or neither).
Each part is read with only the columns asked for and cut to the time range; the labels come
from GroundTruth by their predictions' timestamps and are placed by sample id. Embeddings come
back as row views of one (n, dim) float32 matrix, numbers as float64 arrays, text as object
arrays.

Index rows without a part (samples stored as JSON rows before the columnar store) are not read
here: a window that holds any is refused (``UnmovedSamples``) until ``samples_to_columnar``
moves them, rather than checked on part of its samples.
"""

import logging
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

import numpy as np
import orjson
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from django.db import connection, transaction
from django.db.models import Q, Sum
from django.db.models.functions import Coalesce

from monitoring.models import PredictionSample, SamplePart
from monitoring.pg import server_cursor
from monitoring.samples import DeferredFeatures, SampleColumns, WindowBounds, register_sample_source
from monitoring.store.parts import FEATURE, PROBA, hour_of, part_read
from monitoring.store.summaries import window_counts
from monitoring.window import Kinds, Share, _db_time, _feature_kinds, labels_in_range_sql
from registry.models import RegisteredModel
from registry.reference import LABEL, PREDICTION, PROBA_PREFIX
from workers.drift.sorts import each_column

logger = logging.getLogger(__name__)

_PARTS_SQL = """
WITH p AS (
    SELECT id, name, rows, indexed, bucket FROM monitoring_samplepart
    WHERE model_id = %s AND retired_at IS NULL AND bucket < %s {since}
)
SELECT p.id, p.name, p.rows, p.bucket FROM p
UNION ALL
SELECT s.part_id, NULL, s.part_row, NULL FROM monitoring_predictionsample s JOIN p ON s.part_id = p.id
WHERE p.indexed < p.rows
"""


class UnmovedSamples(Exception):
    """The window holds samples still stored as JSON rows (an index row without a part): a
    check on the rest would be a check on part of the window."""


def unmoved_refuse(model: RegisteredModel, start: datetime | None, end: datetime) -> None:
    """Raise ``UnmovedSamples`` when the window holds an index row without a part (the partial
    index ``sample_unmoved`` answers this without touching the moved rows)."""
    if _unmoved(model, start, end):
        raise UnmovedSamples(
            f"model {model.name!r} has samples in this window still stored as JSON rows (an "
            "install upgraded from before the columnar store): run `python manage.py "
            "samples_to_columnar` to move them into parts, then `python manage.py migrate`"
        )


def _unmoved(model: RegisteredModel, start: datetime | None, end: datetime) -> bool:
    found = PredictionSample.objects.filter(model=model, part__isnull=True, timestamp__lt=end)
    if start is not None:
        found = found.filter(timestamp__gte=start)
    return found.exists()


class ListedPart(NamedTuple):
    """A live part of a window: its file, the rows to read (None: all; a part holding duplicates
    reads only its indexed rows), its hour and how many rows its file holds."""

    id: int
    name: str
    kept: np.ndarray | None
    bucket: datetime
    rows: int


def window_parts(model: RegisteredModel, start: datetime | None, end: datetime) -> list[ListedPart]:
    """The window's live parts (pruned by hour), in id order."""
    params: list[Any] = [model.pk, _db_time(end)]
    since = ""
    if start is not None:
        since = "AND bucket >= %s"
        params.append(_db_time(hour_of(start)))
    with connection.cursor() as cursor:
        cursor.execute(_PARTS_SQL.format(since=since), params)
        found = cursor.fetchall()
    parts = {pk: (name, rows, bucket) for pk, name, rows, bucket in found if name is not None}
    masks: dict[int, list[int]] = {}
    for pk, name, row, _ in found:
        if name is None:
            masks.setdefault(pk, []).append(row)
    return [
        ListedPart(
            pk,
            name,
            np.sort(np.asarray(masks[pk], dtype="int64")) if pk in masks else None,
            _aware(bucket),
            int(rows),
        )
        for pk, (name, rows, bucket) in sorted(parts.items())
    ]


def window_rows_bounds(
    model: RegisteredModel, start: datetime | None, end: datetime
) -> tuple[int, int] | None:
    """(at least, at most) the samples a range window holds, from its hours' live parts' indexed
    rows (one aggregate over the parts, not a count of the index rows: 0.75 s at 10M): the hours
    wholly inside it, and every hour it touches. None when an index row of the window has no
    part (a JSON row not moved yet: the parts do not hold them all)."""
    if _unmoved(model, start, end):
        return None
    parts = SamplePart.objects.filter(model=model, retired_at__isnull=True, bucket__lt=end)
    whole = Q(bucket__lte=end - timedelta(hours=1))
    if start is not None:
        first = hour_of(start)
        parts = parts.filter(bucket__gte=first)
        whole &= Q(bucket__gte=first if first == start else first + timedelta(hours=1))
    found = parts.aggregate(high=Coalesce(Sum("indexed"), 0), low=Coalesce(Sum("indexed", filter=whole), 0))
    return int(found["low"]), int(found["high"])


def _index_where(model: RegisteredModel, start: datetime | None, end: datetime, params: list[Any]) -> str:
    where = "s.model_id = %s AND s.timestamp < %s AND s.part_id IS NOT NULL"
    params += [model.pk, _db_time(end)]
    if start is not None:
        where += " AND s.timestamp >= %s"
        params.append(_db_time(start))
    return where


def _last_n_start(model: RegisteredModel, window: WindowBounds) -> datetime | None:
    """The timestamp of the last_n-th newest indexed sample (labelled, with labelled_only);
    None when there are fewer (the window is then all of them)."""
    params: list[Any] = []
    where = _index_where(model, window.start, window.end, params)
    join = (
        "JOIN monitoring_groundtruth g ON g.model_id = s.model_id AND g.sample_id = s.sample_id"
        if window.labelled_only
        else ""
    )
    sql = (
        f"SELECT s.timestamp FROM monitoring_predictionsample s {join} WHERE {where} "
        "ORDER BY s.timestamp DESC, s.id DESC LIMIT 1 OFFSET %s"
    )
    params.append(int(window.last_n or 0) - 1)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    if row is None:
        return window.start
    return _aware(row[0])


def _aware(value: Any) -> datetime:
    """A time from raw SQL as an aware datetime (SQLite's come back naive UTC, or as text)."""
    found = pd.Timestamp(value)
    return (found if found.tzinfo else found.tz_localize("UTC")).to_pydatetime()


# For each part read, in the window's row order: its hour (hours since the epoch) and its rows.
PartHours = list[tuple[int, int]]
US_PER_HOUR = 3_600_000_000


class WindowLabels(NamedTuple):
    """Labels of the window's time range: each one's sample id, its label (a class code, -1 for a
    class the model does not know, or a float for regression) and when it became known
    (microseconds since the epoch)."""

    sample_id: pa.Array
    label: np.ndarray
    received: np.ndarray
    sample_at: np.ndarray  # its prediction's timestamp (microseconds since the epoch)


# On PostgreSQL they come back as two values: fixed-width records in the types' binary send forms
# (big-endian: the id's length, the class code matched by the server or the float label,
# timestamptz_send's microseconds since 2000-01-01 of when it became known and of its prediction)
# and the ids end to end, as text whose binary form is their UTF-8 bytes (read as bytes, not
# decoded), which Arrow takes as a string array without a Python object per label. Text rather
# than convert_to's bytea: convert_to looks its encoding up per label (a 10M window's halves,
# 2,500,000 labels each read side by side: 1.52-1.57 s against 1.68-1.73 s).
_LABELS_POSTGRES = """
SELECT string_agg(
           int4send(octet_length(w.sample_id)) || {label} || timestamptz_send(w.known) || timestamptz_send(w.at),
           ''::bytea
       ),
       string_agg(w.sample_id, '')
FROM ({labels}) w
"""
_CLASS_CODE = "int4send(COALESCE(array_position(%s::text[], w.label #>> '{}'), 0) - 1)"
_NUMBER = "float8send(CASE WHEN jsonb_typeof(w.label) = 'number' THEN (w.label)::float8 ELSE 'NaN' END)"
_EPOCH_2000_US = 946_684_800_000_000  # 2000-01-01 in microseconds since 1970-01-01


def window_labels(
    model: RegisteredModel, start: datetime | None, end: datetime, parts: Sequence[ListedPart] = ()
) -> WindowLabels:
    """The labels of the samples timed in [start, end), their prediction's or not in yet."""
    return _joined(_labels_in_halves(model, start, end, parts))


def _joined(found: Sequence[WindowLabels]) -> WindowLabels:
    return WindowLabels(
        pa.concat_arrays([f.sample_id for f in found]),
        np.concatenate([f.label for f in found]),
        np.concatenate([f.received for f in found]),
        np.concatenate([f.sample_at for f in found]),
    )


# A window of at least this many rows in its parts reads its labels while the parts are read and
# typed, half of them (by label id: a window's labels need not be spread evenly over its time)
# on each of two connections of their own: the statement is PostgreSQL's work (a scan of the
# range and a record built per label), not this process's. A 1M window (500,000 labels, all in
# the first half of its hours): its labels 0.35-0.68 s on one connection.
CONCURRENT_LABELS_ROWS = 200_000


def labels_meanwhile(
    model: RegisteredModel, start: datetime | None, end: datetime, parts: Sequence[ListedPart]
) -> Callable[[], WindowLabels]:
    """Start reading the window's labels → a function that waits for them.

    Concurrently only on PostgreSQL outside a transaction (a check reads its window in autocommit:
    another connection then sees what this one would; inside a transaction it would not see this
    one's uncommitted rows, so the labels are then read here, when asked for). The halves are
    two statements, as the parts' listing and the labels' read already are: placed by sample id,
    a label is on its sample whatever commits in between, and a label sent again keeps its id."""
    if (
        connection.vendor != "postgresql"
        or connection.in_atomic_block
        or sum(part.rows for part in parts) < CONCURRENT_LABELS_ROWS
    ):
        return lambda: window_labels(model, start, end, parts)
    pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="labels")
    halves = [pool.submit(_labels_apart, model, start, end, parts, (k, 2)) for k in range(2)]
    pool.shutdown(wait=False)  # the threads end with their reads
    return lambda: _joined([labels for half in halves for labels in half.result()])


def _labels_apart(
    model: RegisteredModel, start: datetime | None, end: datetime, parts: Sequence[ListedPart], share: Share
) -> list[WindowLabels]:
    """A share of a window's labels, on this thread's own connection, closed when done."""
    try:
        return _labels_in_halves(model, start, end, parts, share)
    finally:
        connection.close()


SPLIT_FINEST = timedelta(seconds=1)  # the narrowest range read in halves again


def _labels_in_halves(
    model: RegisteredModel,
    start: datetime | None,
    end: datetime,
    parts: Sequence[ListedPart],
    share: Share = None,
) -> list[WindowLabels]:
    """One statement for the window; where it fails on PostgreSQL's cap of a value (1 GB: the
    ids' bytea of millions of labels with long ids), each half of the window is read apart."""
    if connection.vendor != "postgresql":
        return [_labels_read(model, start, end, share)]
    import psycopg

    try:
        with transaction.atomic():  # a savepoint: only this statement is undone
            return [_labels_read(model, start, end, share)]
    except psycopg.errors.ProgramLimitExceeded:
        lower = start or min((part.bucket for part in parts), default=None)
        if lower is None or end - lower < SPLIT_FINEST:
            raise
        middle = lower + (end - lower) / 2
        logger.info("model %s: the window's labels are over one value's cap; reading each half", model.pk)
        # From the first part's hour when the window has no start: no part holds an earlier sample.
        return _labels_in_halves(model, lower, middle, parts, share) + _labels_in_halves(
            model, middle, end, parts, share
        )


def _labels_read(
    model: RegisteredModel, start: datetime | None, end: datetime, share: Share = None
) -> WindowLabels:
    params: list[Any] = []
    if connection.vendor == "postgresql":
        label = _NUMBER
        if model.is_classification:
            label = _CLASS_CODE
            params.append([str(c) for c in model.classes])
        sql = _LABELS_POSTGRES.format(
            label=label, labels=labels_in_range_sql(model, start, end, params, share)
        )
        from psycopg.types.string import ByteaBinaryLoader  # PostgreSQL's driver: never on SQLite

        with server_cursor() as cursor:  # binary results: the bytea as is, not as hex text
            cursor.adapters.register_loader("text", ByteaBinaryLoader)  # the ids' UTF-8 as is
            if share is not None:
                # Its own connection's transaction, beside the other shares: each statement on one
                # core (with parallel workers, the two halves of a 10M window's labels ran 6
                # processes on 2 cores: 2.07-2.18 s against 1.66-1.73 s).
                cursor.execute("SET LOCAL max_parallel_workers_per_gather = 0")
            cursor.execute(sql, params, binary=True)
            raw, ids = cursor.fetchone() or (None, None)
        kind = ">i4" if model.is_classification else ">f8"
        rows = np.frombuffer(
            raw or b"", [("length", ">i4"), ("label", kind), ("received", ">i8"), ("at", ">i8")]
        )
        offsets = np.zeros(len(rows) + 1, dtype="int32")
        np.cumsum(rows["length"], out=offsets[1:])
        return WindowLabels(
            pa.StringArray.from_buffers(len(rows), pa.py_buffer(offsets), pa.py_buffer(bytes(ids or b""))),
            rows["label"].astype("int64" if model.is_classification else "float64"),
            rows["received"].astype("int64") + _EPOCH_2000_US,
            rows["at"].astype("int64") + _EPOCH_2000_US,
        )
    sql = labels_in_range_sql(model, start, end, params, share)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        found = cursor.fetchall()
    sample_ids, labels, times, sample_times = zip(*found, strict=True) if found else ((), (), (), ())
    if model.is_classification:
        # SQLite's JSON text comes back as stored: classes are matched on the decoded value as text.
        texts = pa.array([None if v is None else _label_text(v) for v in labels], pa.string())
        values = _class_codes(texts, model.classes)
    else:
        decoded = [None if v is None else orjson.loads(v) for v in labels]
        values = pd.to_numeric(pd.Series(decoded, dtype=object), errors="coerce").to_numpy("float64")
    return WindowLabels(
        pa.array(sample_ids, pa.string()), values, _microseconds(times), _microseconds(sample_times)
    )


def _microseconds(times: Sequence[Any]) -> np.ndarray:
    """SQLite's times (text, or datetimes) as microseconds since the epoch."""
    stamps = pd.to_datetime(pd.Series(times, dtype=object), utc=True, format="ISO8601")
    return np.asarray(stamps.dt.as_unit("us").array.asi8, dtype="int64")


def _label_text(stored: str) -> str | None:
    """A label's JSON text as the class text PostgreSQL's ``#>> '{}'`` gives (None for null)."""
    value = orjson.loads(stored)
    return None if value is None else value if isinstance(value, str) else stored


def _place(
    window_ids: pa.ChunkedArray, hours: PartHours, labels: WindowLabels
) -> tuple[np.ndarray, np.ndarray]:
    """(rows of the window that have a label, which label each has), by Arrow's hash kernel on
    the ids, an hour at a time: each label is looked for among the rows of its prediction's hour
    (``sample_at``: a part holds one hour, the one its samples' timestamps are in, and the label's
    hour is its sample's). A 10M window's 5,000,000 labels in one hash table took 5.6-6.2 s (a
    cache miss per probe); 24 tables of an hour's labels 1.6 s, 0.7 s on two threads. Labels of
    samples the window does not hold (another store, a part listed later) are left out."""
    if len(labels.label) == 0 or not hours:
        return np.empty(0, dtype="int64"), np.empty(0, dtype="int64")
    label_hours = labels.sample_at // US_PER_HOUR
    order = np.argsort(label_hours, kind="stable")
    label_hours = label_hours[order]
    ids = labels.sample_id.take(pa.array(order))  # an hour's labels are then one slice
    offsets = np.cumsum([0] + [rows for _, rows in hours])
    parts_of: dict[int, list[int]] = {}
    for k, (hour, _) in enumerate(hours):
        parts_of.setdefault(hour, []).append(k)

    def hour_place(hour: int) -> tuple[np.ndarray, np.ndarray]:
        lo, hi = np.searchsorted(label_hours, [hour, hour + 1])
        if lo == hi:  # no label of this hour: its rows are not gathered
            return np.empty(0, dtype="int64"), np.empty(0, dtype="int64")
        parts = parts_of[hour]
        rows = np.concatenate([np.arange(offsets[k], offsets[k + 1]) for k in parts])
        probe = pa.chunked_array(
            [c for k in parts for c in window_ids.slice(offsets[k], offsets[k + 1] - offsets[k]).chunks],
            window_ids.type,
        )
        found = pc.index_in(probe, value_set=ids.slice(lo, hi - lo))
        codes = np.asarray(found.fill_null(-1).to_numpy(zero_copy_only=False), dtype="int64")
        hit = np.flatnonzero(codes >= 0)
        return rows[hit], order[lo + codes[hit]]

    placed = each_column(hour_place, list(parts_of), len(window_ids))
    return np.concatenate([at for at, _ in placed]), np.concatenate([which for _, which in placed])


def _read(
    name: str, rows: np.ndarray | None, columns: list[str], start: datetime | None, end: datetime
) -> pa.Table:
    """The part's rows in the window."""
    table = part_read(name, columns)
    if rows is not None:
        table = table.take(pa.array(rows))
    ts = table.column("timestamp")
    lo, hi = pa.scalar(start or datetime.min.replace(tzinfo=UTC), ts.type), pa.scalar(end, ts.type)
    bounds = pc.min_max(ts)
    if len(table) == 0 or (
        pc.greater_equal(bounds["min"], lo).as_py() and pc.less(bounds["max"], hi).as_py()
    ):
        return table  # wholly inside the window: no copy (filtering 1M rows cost ~2 s)
    return table.filter(pc.and_(pc.greater_equal(ts, lo), pc.less(ts, hi)))


def _class_codes(values: Any, classes: list[Any]) -> np.ndarray:
    """Each text class label's place in ``classes`` (-1: missing or unknown), by Arrow's hash
    kernel on the text as stored: converting a 1M-row column to Python strings first, then
    matching them, cost 0.45 s."""
    found = pc.index_in(values, value_set=pa.array([str(c) for c in classes], pa.string()))
    return np.asarray(found.fill_null(-1).to_numpy(zero_copy_only=False), dtype="int64")


def _class_values(codes: np.ndarray, classes: list[Any]) -> np.ndarray:
    """Codes → the model's class values, typed as a map of the values onto the classes infers them
    (int64 when every value is an int class; float64 when ints meet a missing one; else object
    with None for a missing or unknown value): inferred on one value of each kind present,
    which is what pandas infers for the whole column."""
    lookup = np.array([*classes, None], dtype=object)  # -1 takes the trailing None
    present = np.flatnonzero(np.bincount(codes + 1, minlength=len(lookup))) - 1
    typed = pd.Series(lookup[present], dtype=object).infer_objects().to_numpy()
    if typed.dtype == object:
        return lookup[codes]
    table = np.zeros(len(lookup), dtype=typed.dtype)
    table[present] = typed
    return table[codes]


def _embedding_rows(column: pa.ChunkedArray) -> np.ndarray:
    """A fixed-size float32 list column → an object array of row views, None where the row is
    null (a missing value of a feature that allows them). Each chunk's rows are views of that
    chunk's (rows, dim) matrix, zero-copy on the part's memory map: combining the chunks first
    copied the whole window (0.66 of 0.84 s for 100,000 x 768)."""
    out = np.empty(len(column), dtype=object)
    at = 0
    for chunk in column.chunks:
        size = chunk.type.list_size
        # .values is the whole child (null rows' slots included) and ignores a slice's offset
        values = chunk.values.slice(chunk.offset * size, len(chunk) * size)
        # zero-copy unless the child has nulls (a null row's slots may be null): then one copy of the chunk
        rows = list(values.to_numpy(zero_copy_only=False).reshape(len(chunk), size))
        out[at : at + len(chunk)] = rows if rows else []
        if chunk.null_count:
            nulls = chunk.is_null().to_numpy(zero_copy_only=False)
            out[at : at + len(chunk)][nulls] = None
        at += len(chunk)
    return out


def feature_values(kind: Any, column: pa.ChunkedArray) -> Any:
    """A part's feature column typed as a window holds it."""
    if pa.types.is_fixed_size_list(column.type):
        return _embedding_rows(column)  # validated at ingest: finite, of the feature's dim, or null
    if pa.types.is_float64(column.type):
        return column.to_numpy()  # stored typed: the cleaned values, null as NaN (column() is a no-op)
    if pa.types.is_string(column.type) and kind.elementwise_column:
        return _by_distinct(kind, column)
    values = column.to_numpy()
    return kind.column(pd.Series(values, copy=False)).to_numpy()


def _by_distinct(kind: Any, column: pa.ChunkedArray) -> np.ndarray:
    """A text column typed by its distinct values: Arrow's hash kernel finds them, the type
    types each once, and the rows take theirs (null rows the type's missing value). A 1M-row
    categorical column turned into 1M Python strings, then typed one by one, took 0.2-0.5 s;
    rows with the same value now share one object, as equal strings compare equal anyway."""
    encoded = pc.dictionary_encode(column.combine_chunks())
    distinct = encoded.dictionary.to_numpy(zero_copy_only=False)
    typed = kind.column(pd.Series([*distinct, None], dtype=object)).to_numpy()
    codes = encoded.indices.fill_null(len(distinct)).to_numpy(zero_copy_only=False)
    return typed[codes]


# The microseconds a nanosecond int64 holds (pandas' datetime64[ns] range, 1677-2262).
_NS_RANGE_US = (-(2**63) // 1000 + 1, (2**63 - 1) // 1000)


def _times(column: pa.ChunkedArray) -> Any:
    """The parts' microseconds as aware nanosecond times: Arrow's cast, and pandas taking the
    integers as they are (pandas' own unit change checked each of 10M values: 0.69 s; this
    0.11). Arrow's cast does not check the range, so it is checked here, as pandas did."""
    bounds = pc.min_max(column.cast(pa.int64()))
    low, high = bounds["min"].as_py(), bounds["max"].as_py()
    if low is not None and not (_NS_RANGE_US[0] <= low and high <= _NS_RANGE_US[1]):
        raise pd.errors.OutOfBoundsDatetime(f"a sample's timestamp is outside 1677-2262: {low}..{high} µs")
    values = column.cast(pa.timestamp("ns", tz="UTC")).to_numpy().view("int64")
    return pd.DatetimeIndex(values, dtype="datetime64[ns, UTC]").array


# A row without a label: when it became known (microseconds since the epoch) reads as NaT.
NO_TIME = np.iinfo("int64").min


class PlacedLabels(NamedTuple):
    """Labels placed on the rows of some parts: each part's id and the rows read of it, in the
    rows' order, and for each row its label (a class code, -1 for none or a class the model does
    not know; or a float, NaN for none) and when it became known (µs since the epoch, NO_TIME
    for none). A fanned-out check's slices each place their hours' labels; the merge puts them
    on the window's rows (``on``) instead of reading the window's labels again."""

    parts: list[tuple[int, int]]
    label: np.ndarray
    received: np.ndarray

    def on(self, parts: Sequence[tuple[int, int]]) -> "PlacedLabels":
        """These labels in the order of ``parts`` (id, rows): exactly the parts they were placed
        on, each with as many rows, else ``LabelsElsewhere``."""
        if sorted(parts) != sorted(self.parts):
            raise LabelsElsewhere(f"labels placed on parts {self.parts}, the window's are {list(parts)}")
        offsets = np.cumsum([0] + [rows for _, rows in self.parts])
        where = {part: k for k, (part, _) in enumerate(self.parts)}
        blocks = [np.arange(offsets[where[part]], offsets[where[part] + 1]) for part, _ in parts]
        order = np.concatenate(blocks) if blocks else np.empty(0, dtype="int64")
        return PlacedLabels(list(parts), self.label[order], self.received[order])


class LabelsElsewhere(Exception):
    """Placed labels are not on the window's parts (its rows changed since they were placed)."""


def placed_join(placed: Sequence[PlacedLabels], classification: bool) -> PlacedLabels:
    """Several parts' placed labels as one."""
    label = np.concatenate([p.label for p in placed]) if placed else np.empty(0)
    return PlacedLabels(
        [part for p in placed for part in p.parts],
        label.astype("int64" if classification else "float64", copy=False),
        np.concatenate([p.received for p in placed]) if placed else np.empty(0, dtype="int64"),
    )


class Snapshot(NamedTuple):
    """A window's rows (the parts' columns asked for; None: no part), its labels placed on them
    (to wait for), and its parts."""

    table: pa.Table | None
    labels: Callable[[], PlacedLabels]
    parts: list[ListedPart]


def _snapshot(
    model: RegisteredModel,
    columns: list[str],
    start: datetime | None,
    end: datetime,
    placed: PlacedLabels | None = None,
) -> Snapshot:
    """The window's parts read; its labels read meanwhile and placed on its rows by sample id,
    or ``placed`` already (``LabelsElsewhere`` when those are not on these parts' rows)."""
    parts = window_parts(model, start, end)
    labels = labels_meanwhile(model, start, end, parts) if placed is None else None
    tables = [_read(part.name, part.kept, columns, start, end) for part in parts]
    table = pa.concat_tables(tables) if tables else None
    read = [(part.id, len(t)) for part, t in zip(parts, tables, strict=True)]
    if labels is None:
        assert placed is not None
        mine = placed.on(read)
        return Snapshot(table, lambda: mine, parts)
    hours = [(_hours_since_epoch(part.bucket), len(t)) for part, t in zip(parts, tables, strict=True)]
    return Snapshot(table, lambda: _placed(model, table, read, hours, labels()), parts)


def _placed(
    model: RegisteredModel,
    table: pa.Table | None,
    read: list[tuple[int, int]],
    hours: PartHours,
    found: WindowLabels,
) -> PlacedLabels:
    n = 0 if table is None else len(table)
    label = np.full(n, -1, dtype="int64") if model.is_classification else np.full(n, np.nan)
    received = np.full(n, NO_TIME, dtype="int64")
    if table is not None:
        at, which = _place(table.column("sample_id"), hours, found)
        label[at] = found.label[which]
        received[at] = found.received[which]
    return PlacedLabels(read, label, received)


def slice_table(model: RegisteredModel, start: datetime, end: datetime, names: Sequence[str]) -> Snapshot:
    """The features ``names`` of the samples in [start, end) as the parts hold them (no index
    columns; None: no part), the parts, and the slice's labels placed on its rows, to wait for
    (read meanwhile: a fanned-out check's slice measures its features while they come, and the
    merge then reads no label)."""
    return _snapshot(model, ["timestamp", "sample_id", *(FEATURE + name for name in names)], start, end)


def _hours_since_epoch(bucket: datetime) -> int:
    return int(pd.Timestamp(bucket).value // 1000 // US_PER_HOUR)


class ColumnarSampleSource:
    """Windows read from the columnar store's parts (``DRIFTWATCH_SAMPLE_SOURCE=columnar``)."""

    def load(
        self,
        *,
        model: RegisteredModel,
        window: WindowBounds,
        columns: Sequence[str] | None = None,
        defer_above: int | None = None,
        counted: bool = False,
        labels: PlacedLabels | None = None,
    ) -> SampleColumns:
        """``labels``: the window's labels placed on its parts' rows already (a fanned-out check's
        slices placed them): none is read, and ``LabelsElsewhere`` is raised when they are not
        on the rows this window holds."""
        kinds = _feature_kinds(model, columns)
        start = _last_n_start(model, window) if window.last_n is not None else window.start
        unmoved_refuse(model, start, window.end)  # the last_n newest: any unmoved row among them
        wanted = ["sample_id", "timestamp", "version_id", "prediction"]
        wanted += [PROBA + str(c) for c in model.classes] + [FEATURE + n for n in kinds]
        snapshot = _snapshot(model, wanted, start, window.end, labels)
        table, deferred, counts = snapshot.table, None, {}
        if counted and window.last_n is None and table is not None:
            names = [name for name, kind in kinds.items() if kind.counted]
            counts = window_counts(snapshot.parts, start, window.end, names)
        if table is not None and kinds and defer_above is not None and len(table) > defer_above:
            # The parts' columns stay where they are (memory-mapped), each typed when asked for.
            deferred = _deferred(tuple(kinds), kinds, table)
            kinds = {}
        elif table is not None and counts:  # counted from the summaries: read only if asked for
            deferred = _deferred(tuple(counts), kinds, table)
            kinds = {name: kind for name, kind in kinds.items() if name not in counts}
        arrays = self._arrays(model, kinds, snapshot)
        if window.last_n is not None:
            order = _newest_order(arrays, window)
            arrays = {name: values[order] for name, values in arrays.items()}
            deferred = None if deferred is None else deferred.rows(order)
        if model.is_classification:  # typed after the trim: its dtype depends on the rows kept
            for name in (PREDICTION, LABEL):
                arrays[name] = _class_values(arrays[name], model.classes)
        return SampleColumns(arrays, deferred, counts)

    def _arrays(self, model: RegisteredModel, kinds: Kinds, snapshot: Snapshot) -> dict[str, Any]:
        """The window's columns (classes as codes, typed by ``load``), the labels placed on their
        rows by sample id once the rest is typed (``labels`` waits for them)."""
        table = snapshot.table
        if table is None:  # no part: no row for a label to land on
            return _empty(model, kinds)
        arrays: dict[str, Any] = {
            name: feature_values(kind, table.column(FEATURE + name)) for name, kind in kinds.items()
        }
        prediction = table.column("prediction")
        if model.is_classification:
            arrays[PREDICTION] = _class_codes(prediction, model.classes)
        else:
            arrays[PREDICTION] = prediction.to_numpy().astype("float64", copy=False)
        for cls in model.classes:
            arrays[PROBA_PREFIX + str(cls)] = (
                table.column(PROBA + str(cls)).to_numpy().astype("float64", copy=False)
            )
        # Arrow's strings as they are: no check reads the ids, and as Python strings 1M of them
        # cost 70 ms and 60 MB.
        arrays["sample_id"] = pd.arrays.ArrowStringArray(table.column("sample_id"))
        arrays["version_id"] = table.column("version_id").to_numpy().astype("float64")
        arrays["timestamp"] = _times(table.column("timestamp"))
        placed = snapshot.labels()
        arrays[LABEL] = placed.label
        received = placed.received.view("datetime64[us]").astype("datetime64[ns]")  # NO_TIME: NaT
        arrays["label_received_at"] = pd.DatetimeIndex(received, tz="UTC").array
        return arrays


def _empty(model: RegisteredModel, kinds: Kinds) -> dict[str, Any]:
    names = [
        *kinds,
        PREDICTION,
        LABEL,
        *(PROBA_PREFIX + str(c) for c in model.classes),
        "sample_id",
        "version_id",
    ]
    arrays: dict[str, Any] = {name: np.empty(0, dtype=object) for name in names}
    if model.is_classification:  # class codes, as ``_arrays`` gives them
        arrays[PREDICTION] = arrays[LABEL] = np.empty(0, dtype="int64")
    arrays["timestamp"] = pd.DatetimeIndex([], tz="UTC").as_unit("ns").array
    arrays["label_received_at"] = pd.DatetimeIndex([], tz="UTC").as_unit("ns").array
    return arrays


def _newest_order(arrays: dict[str, Any], window: WindowBounds) -> np.ndarray:
    """The rows of the last_n newest (of the labelled, with labelled_only), newest first; rows
    read in part and row order break ties on the timestamp."""
    times = np.asarray(arrays["timestamp"].asi8)
    keep = np.arange(len(times))
    if window.labelled_only:
        keep = keep[pd.notna(arrays["label_received_at"])]
    return keep[np.lexsort((keep, times[keep]))[::-1]][: window.last_n]


def _category_reader(kinds: Kinds, table: pa.Table) -> Callable[[str], Any]:
    """A category-encoded text feature of the window's table as a pandas Categorical of its typed
    distinct values, when they are distinct strings once typed (None otherwise)."""

    def read(name: str) -> Any:
        kind, column = kinds[name], table.column(FEATURE + name)
        if kind.encoding != "category" or not kind.elementwise_column or not pa.types.is_string(column.type):
            return None
        encoded = pc.dictionary_encode(column.combine_chunks())
        typed = kind.column(pd.Series(encoded.dictionary.to_numpy(zero_copy_only=False), dtype=object))
        if not all(isinstance(v, str) for v in typed) or typed.duplicated().any():
            return None
        codes = encoded.indices.fill_null(-1).to_numpy(zero_copy_only=False)
        return pd.Categorical.from_codes(codes, categories=pd.Index(typed.to_numpy(), dtype=object))

    return read


def _deferred(names: tuple[str, ...], kinds: Kinds, table: pa.Table) -> DeferredFeatures:
    """These features of the window's table, read from its parts when asked for."""
    return DeferredFeatures(
        names, _column_reader(kinds, table), None, _category_reader(kinds, table), *_rows_reader(kinds, table)
    )


def _column_reader(kinds: Kinds, table: pa.Table) -> Callable[[str], Any]:
    """A feature of the window's table, typed as ``_arrays`` types it, read when called."""
    return lambda name: feature_values(kinds[name], table.column(FEATURE + name))


def _rows_reader(
    kinds: Kinds, table: pa.Table
) -> tuple[Callable[[str, slice | np.ndarray], Any], frozenset[str]]:
    """Some rows of a feature of the window's table (a slice of the memory-mapped parts, or
    Arrow's take of positions), typed as the whole column is, and the features it reads so:
    those stored typed (float64) or whose type types each value by itself."""
    sliced = frozenset(
        name
        for name, kind in kinds.items()
        if pa.types.is_float64(table.schema.field(FEATURE + name).type) or kind.elementwise_column
    )

    def read(name: str, rows: slice | np.ndarray) -> Any:
        column = table.column(FEATURE + name)
        if isinstance(rows, slice):
            start, stop, _ = rows.indices(len(column))
            return feature_values(kinds[name], column.slice(start, stop - start))
        return feature_values(kinds[name], column.take(pa.array(rows, pa.int64())))

    return read, sliced


register_sample_source("columnar", ColumnarSampleSource)
