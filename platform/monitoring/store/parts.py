"""The part file: one Arrow IPC file of samples, its schema derived from the model's features.

Columns: sample_id, timestamp (UTC, µs), version_id (int64, null: none), prediction (text for
classes, float64 for regression), one float64 ``proba:<class>`` per class, and one
``feature:<name>`` per feature typed by its feature type: float64 numbers, fixed-size float32
lists for embeddings (null where missing), text for categories, texts and any other type (JSON
text of a non-string value, which that type's ``column`` reads back).
"""

import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import numpy as np
import orjson
import pandas as pd
import pyarrow as pa
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from django.utils import timezone

from monitoring.validation import CleanSample
from registry.schema import Schema
from workers.features import FeatureKind

PREFIX = "samples"  # the parts' folder in the storage
FEATURE = "feature:"
PROBA = "proba:"


def feature_arrow_type(kind: FeatureKind[Any]) -> pa.DataType:
    if kind.storage_dtype == "float64":
        return pa.float64()
    if dim := kind.vector_dim:  # an embedding: a fixed-size list of float32
        return pa.list_(pa.float32(), dim)
    return pa.string()


def part_schema(schema: Schema) -> pa.Schema:
    fields = [
        pa.field("sample_id", pa.string()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("version_id", pa.int64()),
        pa.field("prediction", pa.string() if schema.is_classification else pa.float64()),
    ]
    fields += [pa.field(PROBA + str(c), pa.float64()) for c in schema.classes]
    fields += [pa.field(FEATURE + n, feature_arrow_type(k)) for n, k in schema.feature_kinds.items()]
    return pa.schema(fields)


def text_value(value: Any) -> str | None:
    return value if value is None or isinstance(value, str) else orjson.dumps(value).decode()


def feature_array(kind: FeatureKind[Any], type_: pa.DataType, values: list[Any]) -> pa.Array:
    if pa.types.is_fixed_size_list(type_):
        return _vectors_array(values, type_.list_size)
    if pa.types.is_floating(type_):
        return pa.array(np.array([np.nan if v is None else v for v in values], dtype="float64"))
    return pa.array([text_value(v) for v in values], type=pa.string())


def _vectors_array(values: list[Any], dim: int) -> pa.FixedSizeListArray:
    """Cleaned vectors (each of ``dim`` numbers) as a fixed-size float32 list column; a missing
    one (a feature registered with ``"missing": "allow"``) is a null row over ``dim`` zeros."""
    missing = np.fromiter((v is None for v in values), dtype=bool, count=len(values))
    if not missing.any():
        flat = np.asarray(values, dtype="float32").reshape(-1)
        return pa.FixedSizeListArray.from_arrays(pa.array(flat), dim)
    matrix = np.zeros((len(values), dim), dtype="float32")
    for i in np.flatnonzero(~missing):
        matrix[i] = values[i]
    return pa.FixedSizeListArray.from_arrays(pa.array(matrix.reshape(-1)), dim, mask=pa.array(missing))


def samples_batch(
    schema: Schema, arrow: pa.Schema, samples: Sequence[CleanSample], versions: Sequence[int | None]
) -> pa.RecordBatch:
    """One chunk of cleaned samples as a record batch of the part schema."""
    columns: list[pa.Array] = [
        pa.array([s.sample_id for s in samples], pa.string()),
        pa.array([s.timestamp for s in samples], arrow.field("timestamp").type),
        pa.array(list(versions), pa.int64()),
        pa.array(
            [text_value(s.prediction) if schema.is_classification else s.prediction for s in samples],
            arrow.field("prediction").type,
        ),
    ]
    for c in schema.classes:
        key = str(c)
        columns.append(
            pa.array(
                [None if s.probabilities is None else s.probabilities.get(key) for s in samples], pa.float64()
            )
        )
    for name, kind in schema.feature_kinds.items():
        type_ = arrow.field(FEATURE + name).type
        columns.append(feature_array(kind, type_, [s.features.get(name) for s in samples]))
    return pa.RecordBatch.from_arrays(columns, schema=arrow)


def hour_of(value: datetime) -> datetime:
    """The UTC hour ``value`` is in (the hour of the part that holds a sample of that time)."""
    utc = value.astimezone(UTC) if value.tzinfo is not None else value
    return utc.replace(minute=0, second=0, microsecond=0)


def part_name(model_id: int, bucket: datetime) -> str:
    """``<prefix>/<model>/<hour>/<written, ms since the epoch>-<uuid>.arrow``: the write time in
    the name is the platform's own clock, which the collector's grace is measured against (a
    storage's modified time is another clock: S3's, a file server's)."""
    return f"{PREFIX}/{model_id}/{bucket:%Y%m%d%H}/{written_stamp()}-{uuid.uuid4().hex}.arrow"


def written_stamp() -> int:
    """Now on the platform's clock, in ms since the epoch: the start of a stored file's name that
    ``part_written_at`` reads back (parts, and a fanned-out check's slice files)."""
    return int(timezone.now().timestamp() * 1000)


def part_written_at(name: str) -> datetime | None:
    """The write time a part's name carries; None for a name without one."""
    stem = name.rsplit("/", 1)[-1].split("-", 1)[0]
    return datetime.fromtimestamp(int(stem) / 1000, tz=UTC) if stem.isdigit() else None


def table_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def part_write(*, model_id: int, bucket: datetime, table: pa.Table) -> tuple[str, int]:
    """Save the table as a new part file in the storage → (its name, its size in bytes)."""
    data = table_bytes(table)
    name = default_storage.save(part_name(model_id, bucket), ContentFile(data))
    return name, len(data)


def part_read(name: str, columns: Sequence[str] | None = None) -> pa.Table:
    """A part file's table (only ``columns``); a local file is memory-mapped, not copied."""
    try:
        path = default_storage.path(name)
    except NotImplementedError:  # a remote storage (S3): the whole file over the network
        with default_storage.open(name, "rb") as handle:
            source: Any = pa.BufferReader(handle.read())
    else:
        source = pa.memory_map(path, "r")
    table = pa.ipc.open_file(source).read_all()
    return table if columns is None else table.select(list(columns))


def timestamps(table: pa.Table) -> pd.DatetimeIndex:
    return pd.DatetimeIndex(table.column("timestamp").to_pandas())
