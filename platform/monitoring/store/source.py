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

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from django.db import connection

from monitoring.samples import SampleColumns, WindowBounds, register_sample_source
from monitoring.store.parts import FEATURE, PROBA, hour_of, part_read
from monitoring.window import Kinds, _db_time, _feature_kinds, _fetch_frame, _json_text
from registry.models import RegisteredModel
from registry.reference import LABEL, PREDICTION, PROBA_PREFIX

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


def window_labels(model: RegisteredModel, start: datetime | None, end: datetime) -> pd.DataFrame:
    """sample_id, LABEL (as text, or float for regression) and label_received_at of the
    window's labelled samples."""
    params: list[Any] = []
    label = _json_text("g.label", None, params)
    where = _index_where(model, start, end, params)
    sql = (
        f"SELECT s.sample_id, {label}, COALESCE(g.labelled_at, g.received_at) "
        f"FROM monitoring_predictionsample s JOIN {_JOIN_LABELS} WHERE {where}"
    )
    names = ["sample_id", LABEL, "label_received_at"]
    dtypes = {LABEL: "str" if model.is_classification else "float64"}
    frame = _fetch_frame(sql, params, names, dtypes)
    if model.is_classification and connection.vendor != "postgresql":
        # SQLite's json_extract hands back numbers as numbers: classes are matched as text.
        frame[LABEL] = [None if v is None else str(v) for v in frame[LABEL]]
    return frame


def _read(
    name: str, rows: np.ndarray | None, columns: list[str], start: datetime | None, end: datetime
) -> pa.Table:
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


def _positions(values: Any, among: Any) -> np.ndarray:
    """Where each value is in ``among`` (-1: nowhere), by Arrow's hash kernel (3x pandas' on text)."""
    found = pc.index_in(pa.array(values, pa.string()), value_set=pa.array(among, pa.string()))
    return found.fill_null(-1).to_numpy()


def _classes(values: np.ndarray, classes: list[Any]) -> np.ndarray:
    """Text class labels (None: missing) → the model's class values, vectorised."""
    codes = _positions(values, [str(c) for c in classes])
    lookup = np.array([*classes, None], dtype=object)
    # -1 (missing or unknown) takes the trailing None; typed as the relational source's map
    # infers it (int64 when every value is an int class, else object).
    return pd.Series(lookup[codes], dtype=object).infer_objects().to_numpy()


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
    values = column.to_numpy()
    return kind.column(pd.Series(values, copy=False)).to_numpy()


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
        tables = [
            _read(name, rows, wanted, start, window.end)
            for _, name, rows in window_parts(model, start, window.end)
        ]
        table = pa.concat_tables(tables) if tables else None
        arrays = self._arrays(model, kinds, table, window_labels(model, start, window.end))
        if window.last_n is not None:
            arrays = _newest(arrays, window)
        if model.is_classification:  # typed after the trim: its dtype depends on the rows kept
            for name in (PREDICTION, LABEL):
                arrays[name] = _classes(arrays[name], model.classes)
        return SampleColumns(arrays)

    def _arrays(
        self, model: RegisteredModel, kinds: Kinds, table: pa.Table | None, labels: pd.DataFrame
    ) -> dict[str, Any]:
        if table is None:
            return _empty(model, kinds)
        sample_ids = table.column("sample_id").to_numpy()
        at = _positions(sample_ids, labels["sample_id"].to_numpy())
        found = at >= 0
        arrays: dict[str, Any] = {
            name: _feature(kind, table.column(FEATURE + name)) for name, kind in kinds.items()
        }
        prediction = table.column("prediction").to_numpy()
        label = np.full(len(table), None, dtype=object)
        label[found] = labels[LABEL].to_numpy(dtype=object)[at[found]]
        if model.is_classification:
            arrays[PREDICTION], arrays[LABEL] = prediction, label  # as text: typed by load
        else:
            arrays[PREDICTION] = prediction.astype("float64")
            arrays[LABEL] = pd.to_numeric(pd.Series(label), errors="coerce").to_numpy("float64")
        for cls in model.classes:
            arrays[PROBA_PREFIX + str(cls)] = table.column(PROBA + str(cls)).to_numpy().astype("float64")
        received = pd.Series(pd.NaT, index=range(len(table)), dtype="datetime64[ns, UTC]")
        received[found] = pd.to_datetime(
            labels["label_received_at"].to_numpy()[at[found]], utc=True, format="ISO8601"
        )
        arrays["sample_id"] = sample_ids.astype(object)
        arrays["version_id"] = table.column("version_id").to_numpy().astype("float64")
        arrays["timestamp"] = _times(table.column("timestamp"))
        arrays["label_received_at"] = received.array
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
