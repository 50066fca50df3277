"""The columnar sample source: a window read from the parts its committed index rows point to.

One SQL statement lists the window's live parts (pruned by hour) together with the rows of the
parts that hold duplicates, so the list and its masks come from one snapshot (a compaction's
swap is one transaction: a window sees the old parts or the new one, never both or neither).
Each part is read with only the columns asked for and cut to the time range; the labels come
from the index ⋈ GroundTruth, joined by sample id. Embeddings come back as row views of one
(n, dim) float32 matrix, numbers as float64 arrays, text as object arrays.

Index rows without a part (samples ingested while the relational store was on) are not read
here: the migration command (to come) moves them.
"""

import logging
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, NamedTuple

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from django.db import connection

from monitoring.samples import SampleColumns, WindowBounds, register_sample_source
from monitoring.store.parts import FEATURE, PROBA, hour_of, part_read
from monitoring.window import Kinds, _db_time, _feature_kinds, _json_text
from registry.models import RegisteredModel
from registry.reference import LABEL, PREDICTION, PROBA_PREFIX

logger = logging.getLogger(__name__)

_PARTS_SQL = """
WITH p AS (
    SELECT id, name, rows, indexed FROM monitoring_samplepart
    WHERE model_id = %s AND retired_at IS NULL AND bucket < %s {since}
)
SELECT p.id, p.name, NULL FROM p
UNION ALL
SELECT s.part_id, NULL, s.part_row FROM monitoring_predictionsample s JOIN p ON s.part_id = p.id
WHERE p.indexed < p.rows
"""


def window_parts(
    model: RegisteredModel, start: datetime | None, end: datetime
) -> list[tuple[int, str, np.ndarray | None]]:
    """(part id, file name, the rows to read or None for all) of the window's live parts."""
    params: list[Any] = [model.pk, _db_time(end)]
    since = ""
    if start is not None:
        since = "AND bucket >= %s"
        params.append(_db_time(hour_of(start)))
    with connection.cursor() as cursor:
        cursor.execute(_PARTS_SQL.format(since=since), params)
        found = cursor.fetchall()
    names = {pk: name for pk, name, _ in found if name is not None}
    masks: dict[int, list[int]] = {}
    for pk, name, row in found:
        if name is None:
            masks.setdefault(pk, []).append(row)
    return [
        (pk, name, np.sort(np.asarray(masks[pk], dtype="int64")) if pk in masks else None)
        for pk, name in sorted(names.items())
    ]


def _index_where(model: RegisteredModel, start: datetime | None, end: datetime, params: list[Any]) -> str:
    where = "s.model_id = %s AND s.timestamp < %s AND s.part_id IS NOT NULL"
    params += [model.pk, _db_time(end)]
    if start is not None:
        where += " AND s.timestamp >= %s"
        params.append(_db_time(start))
    return where


_JOIN_LABELS = "monitoring_groundtruth g ON g.model_id = s.model_id AND g.sample_id = s.sample_id"


def _last_n_start(model: RegisteredModel, window: WindowBounds) -> datetime | None:
    """The timestamp of the last_n-th newest indexed sample (labelled, with labelled_only);
    None when there are fewer (the window is then all of them)."""
    params: list[Any] = []
    where = _index_where(model, window.start, window.end, params)
    join = f"JOIN {_JOIN_LABELS}" if window.labelled_only else ""
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
    found = row[0]
    return found if isinstance(found, datetime) else pd.Timestamp(found).tz_localize("UTC").to_pydatetime()


class WindowLabels(NamedTuple):
    """The window's labelled samples: where each one's payload is (``part_id``, ``part_row``),
    its label (a class code, -1 for a class the model does not know, or a float for
    regression) and when it became known (microseconds since the epoch)."""

    part_id: np.ndarray
    part_row: np.ndarray
    label: np.ndarray
    received: np.ndarray


# On PostgreSQL the labels come back as one bytea of fixed-width records in the types' binary
# send forms (big-endian; timestamptz_send is microseconds since 2000-01-01, exact), the class
# matched to its code by the server: 500,000 labels as CSV rows through COPY took 0.78-0.88 s
# (one Python call per row), as records 0.63-0.68 s, all of it the join (load 0.5-1.0).
_LABELS_POSTGRES = """
SELECT string_agg(
    int8send(s.part_id) || int4send(s.part_row) || {label} || timestamptz_send({received}), ''::bytea
)
FROM monitoring_predictionsample s JOIN {join} WHERE {where}
"""
_CLASS_CODE = "int4send(COALESCE(array_position(%s::text[], g.label #>> '{}'), 0) - 1)"
_NUMBER = "float8send(CASE WHEN jsonb_typeof(g.label) = 'number' THEN (g.label)::float8 ELSE 'NaN' END)"
_EPOCH_2000_US = 946_684_800_000_000  # 2000-01-01 in microseconds since 1970-01-01


def window_labels(model: RegisteredModel, start: datetime | None, end: datetime) -> WindowLabels:
    """The window's labelled samples, placed by position, not by sample id: matching 500,000
    labels to a 1M-row window by id cost 0.66 s (the ids turned into Python strings, then
    hashed), placing them by position costs a few milliseconds."""
    received = "COALESCE(g.labelled_at, g.received_at)"
    if connection.vendor == "postgresql":
        params: list[Any] = []
        label = _NUMBER
        if model.is_classification:
            label = _CLASS_CODE
            params.append([str(c) for c in model.classes])
        where = _index_where(model, start, end, params)
        sql = _LABELS_POSTGRES.format(label=label, received=received, join=_JOIN_LABELS, where=where)
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            (raw,) = cursor.fetchone() or (None,)
        kind = ">i4" if model.is_classification else ">f8"
        rows = np.frombuffer(
            raw or b"", [("part_id", ">i8"), ("part_row", ">i4"), ("label", kind), ("received", ">i8")]
        )
        return WindowLabels(
            rows["part_id"].astype("int64"),
            rows["part_row"].astype("int64"),
            rows["label"].astype("int64" if model.is_classification else "float64"),
            rows["received"].astype("int64") + _EPOCH_2000_US,
        )
    params = []
    label = _json_text("g.label", None, params)
    where = _index_where(model, start, end, params)
    sql = (
        f"SELECT s.part_id, s.part_row, {label}, {received} "
        f"FROM monitoring_predictionsample s JOIN {_JOIN_LABELS} WHERE {where}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        found = cursor.fetchall()
    part_ids, part_rows, labels, times = zip(*found, strict=True) if found else ((), (), (), ())
    if model.is_classification:
        # SQLite's json_extract hands back numbers as numbers: classes are matched as text.
        texts = pa.array([None if v is None else str(v) for v in labels], pa.string())
        values = _class_codes(texts, model.classes)
    else:
        values = pd.to_numeric(pd.Series(labels, dtype=object), errors="coerce").to_numpy("float64")
    stamps = pd.to_datetime(pd.Series(times, dtype=object), utc=True, format="ISO8601")
    return WindowLabels(
        np.asarray(part_ids, dtype="int64"),
        np.asarray(part_rows, dtype="int64"),
        values,
        np.asarray(stamps.dt.as_unit("us").array.asi8, dtype="int64"),
    )


class _Layout:
    """Where each listed part's rows landed in the window's concatenated table: a part's row
    ``r`` is at ``offset + r``, or, for a part read in part (duplicates masked, or cut to the
    time range), at ``offset`` + its place among the rows kept."""

    def __init__(self) -> None:
        self.ids: list[int] = []
        self.offsets: list[int] = []
        self.kept: list[np.ndarray | None] = []
        self.rows = 0

    def add(self, part_id: int, rows: int, kept: np.ndarray | None) -> None:
        self.ids.append(part_id)
        self.offsets.append(self.rows)
        self.kept.append(kept)
        self.rows += rows

    def positions(self, part_ids: np.ndarray, part_rows: np.ndarray) -> np.ndarray | None:
        """Each (part, row)'s place in the table; None if a part is not listed or a row was not
        read (the labels were read from a later snapshot than the parts: a compaction or an
        ingestion committed in between)."""
        if not len(part_ids):
            return np.empty(0, dtype="int64")
        ids = np.asarray(self.ids, dtype="int64")
        order = np.argsort(ids)
        where = _find(ids[order], part_ids)
        if where is None:
            return None
        part = order[where]
        out = np.asarray(self.offsets, dtype="int64")[part] + part_rows
        for i, kept in enumerate(self.kept):
            if kept is not None:
                mine = part == i
                at = _find(kept, part_rows[mine])
                if at is None:
                    return None
                out[mine] = self.offsets[i] + at
        return out


def _find(ordered: np.ndarray, values: np.ndarray) -> np.ndarray | None:
    """Where each of ``values`` is in the ascending ``ordered``; None if one is not there."""
    at = np.searchsorted(ordered, values)
    if (at >= len(ordered)).any() or (ordered[np.minimum(at, len(ordered) - 1)] != values).any():
        return None
    return at


def _read(
    name: str, rows: np.ndarray | None, columns: list[str], start: datetime | None, end: datetime
) -> tuple[pa.Table, np.ndarray | None]:
    """The part's rows in the window, and which of the part's rows they are (None: all, in order)."""
    table = part_read(name, columns)
    if rows is not None:
        table = table.take(pa.array(rows))
    ts = table.column("timestamp")
    lo, hi = pa.scalar(start or datetime.min.replace(tzinfo=UTC), ts.type), pa.scalar(end, ts.type)
    bounds = pc.min_max(ts)
    if len(table) == 0 or (
        pc.greater_equal(bounds["min"], lo).as_py() and pc.less(bounds["max"], hi).as_py()
    ):
        return table, rows  # wholly inside the window: no copy (filtering 1M rows cost ~2 s)
    inside = pc.and_(pc.greater_equal(ts, lo), pc.less(ts, hi))
    at = np.flatnonzero(inside.to_numpy(zero_copy_only=False))
    return table.filter(inside), at if rows is None else rows[at]


def _class_codes(values: Any, classes: list[Any]) -> np.ndarray:
    """Each text class label's place in ``classes`` (-1: missing or unknown), by Arrow's hash
    kernel on the text as stored: converting a 1M-row column to Python strings first, then
    matching them, cost 0.45 s."""
    found = pc.index_in(values, value_set=pa.array([str(c) for c in classes], pa.string()))
    return np.asarray(found.fill_null(-1).to_numpy(zero_copy_only=False), dtype="int64")


def _class_values(codes: np.ndarray, classes: list[Any]) -> np.ndarray:
    """Codes → the model's class values, typed as the relational source's map infers them
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


def _feature(kind: Any, column: pa.ChunkedArray) -> Any:
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


def _times(column: pa.ChunkedArray) -> Any:
    return pd.DatetimeIndex(column.to_pandas()).as_unit("ns").array


class ColumnarSampleSource:
    """Windows read from the columnar store's parts (``DRIFTWATCH_SAMPLE_SOURCE=columnar``)."""

    def load(
        self, *, model: RegisteredModel, window: WindowBounds, columns: Sequence[str] | None = None
    ) -> SampleColumns:
        kinds = _feature_kinds(model, columns)
        start = _last_n_start(model, window) if window.last_n is not None else window.start
        wanted = ["sample_id", "timestamp", "version_id", "prediction"]
        wanted += [PROBA + str(c) for c in model.classes] + [FEATURE + n for n in kinds]
        table, at, labels = _snapshot(model, wanted, start, window.end)
        arrays = self._arrays(model, kinds, table, at, labels)
        if window.last_n is not None:
            arrays = _newest(arrays, window)
        if model.is_classification:  # typed after the trim: its dtype depends on the rows kept
            for name in (PREDICTION, LABEL):
                arrays[name] = _class_values(arrays[name], model.classes)
        return SampleColumns(arrays)

    def _arrays(
        self,
        model: RegisteredModel,
        kinds: Kinds,
        table: pa.Table | None,
        at: np.ndarray,
        labels: WindowLabels,
    ) -> dict[str, Any]:
        """The window's columns (classes as codes, typed by ``load``); the labels go to rows ``at``."""
        if table is None:
            return _empty(model, kinds)
        arrays: dict[str, Any] = {
            name: _feature(kind, table.column(FEATURE + name)) for name, kind in kinds.items()
        }
        prediction = table.column("prediction")
        if model.is_classification:
            arrays[PREDICTION] = _class_codes(prediction, model.classes)
            arrays[LABEL] = np.full(len(table), -1, dtype="int64")
        else:
            arrays[PREDICTION] = prediction.to_numpy().astype("float64")
            arrays[LABEL] = np.full(len(table), np.nan)
        arrays[LABEL][at] = labels.label
        for cls in model.classes:
            arrays[PROBA_PREFIX + str(cls)] = table.column(PROBA + str(cls)).to_numpy().astype("float64")
        received = np.full(len(table), np.datetime64("NaT"), dtype="datetime64[ns]")
        received[at] = labels.received.astype("datetime64[us]")
        # Arrow's strings as they are: no check reads the ids, and as Python strings 1M of them
        # cost 70 ms and 60 MB.
        arrays["sample_id"] = pd.arrays.ArrowStringArray(table.column("sample_id"))
        arrays["version_id"] = table.column("version_id").to_numpy().astype("float64")
        arrays["timestamp"] = _times(table.column("timestamp"))
        arrays["label_received_at"] = pd.DatetimeIndex(received, tz="UTC").array
        return arrays


# A window's parts and labels come from two statements; a compaction or an ingestion that
# commits between them leaves labels pointing at parts not listed: read both again.
SNAPSHOT_TRIES = 5


def _snapshot(
    model: RegisteredModel, columns: list[str], start: datetime | None, end: datetime
) -> tuple[pa.Table | None, np.ndarray, WindowLabels]:
    """The window's rows (the parts' ``columns``), where each label goes among them, the labels."""
    for _ in range(SNAPSHOT_TRIES):
        layout, tables = _Layout(), []
        for part_id, name, rows in window_parts(model, start, end):
            table, kept = _read(name, rows, columns, start, end)
            layout.add(part_id, len(table), kept)
            tables.append(table)
        labels = window_labels(model, start, end)
        at = layout.positions(labels.part_id, labels.part_row)
        if at is not None:
            return (pa.concat_tables(tables) if tables else None), at, labels
        logger.info(
            "model %s: the window's parts changed while its labels were read; reading again", model.pk
        )
    raise RuntimeError(f"model {model.pk}: the window's parts kept changing over {SNAPSHOT_TRIES} reads")


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


def _newest(arrays: dict[str, Any], window: WindowBounds) -> dict[str, Any]:
    """The last_n newest (of the labelled, with labelled_only), newest first like the relational
    source; rows read in part and row order break ties on the timestamp."""
    times = np.asarray(arrays["timestamp"].asi8)
    keep = np.arange(len(times))
    if window.labelled_only:
        keep = keep[pd.notna(arrays["label_received_at"])]
    order = keep[np.lexsort((keep, times[keep]))[::-1]][: window.last_n]
    return {name: values[order] for name, values in arrays.items()}


register_sample_source("columnar", ColumnarSampleSource)
