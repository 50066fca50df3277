"""Loads one window of predictions, joined with their labels, as flat columns.

``window_load`` asks the configured sample source (``monitoring.samples``). The relational one
is here: one SQL query, feature values, predictions, probabilities and labels extracted from JSON
in the database (->> on PostgreSQL, json_extract on SQLite), so no per-row JSON parsing happens
in Python, each feature typed by its feature type.
"""

import io
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import numpy as np
import pandas as pd
from django.db import connection

from monitoring.models import MonitoringPolicy, WindowKind
from monitoring.samples import SampleColumns, WindowBounds, register_sample_source, sample_source
from registry.models import RegisteredModel
from registry.reference import LABEL, PREDICTION, PROBA_PREFIX, WINDOW_COLUMNS
from workers.features import FeatureKind, feature_type

Kinds = dict[str, FeatureKind[Any]]
# The CSV reader's dtype for a type stored as Python objects: the text as it is.
_CSV_DTYPES = {"object": "str"}


@dataclass
class Window:
    frame: pd.DataFrame  # features (schema names), PREDICTION, LABEL, PROBA_PREFIX+class, version, times
    start: datetime
    end: datetime


def _json_text(column: str, key: str | None, params: list[Any]) -> str:
    """SQL for a JSON value as text: the whole scalar (key None) or one object key."""
    if connection.vendor == "postgresql":
        if key is None:
            return f"({column} #>> '{{}}')"
        params.append(key)
        return f"({column} ->> %s)"
    path = "$" if key is None else '$."' + key.replace('"', '""') + '"'
    params.append(path)
    return f"json_extract({column}, %s)"


def _select_list(model: RegisteredModel, kinds: Kinds, params: list[Any]) -> tuple[list[str], list[str]]:
    names, sql = [], []
    for name in kinds:
        names.append(name)
        sql.append(_json_text("s.features", name, params))
    names += [PREDICTION, LABEL]
    sql += [_json_text("s.prediction", None, params), _json_text("g.label", None, params)]
    for cls in model.classes:
        names.append(PROBA_PREFIX + str(cls))
        sql.append(_json_text("s.probabilities", str(cls), params))
    names += list(WINDOW_COLUMNS)
    # Label delay counts from when the truth became known: the client's label timestamp if it
    # sent one (a backfill), else the label's arrival.
    sql += ["s.sample_id", "s.version_id", "s.timestamp", "COALESCE(g.labelled_at, g.received_at)"]
    return names, sql


def window_load(
    *,
    model: RegisteredModel,
    start: datetime | None,
    end: datetime,
    last_n: int | None = None,
    labelled_only: bool = False,
    columns: Sequence[str] | None = None,
) -> Window:
    """Samples with start <= timestamp < end (or the last_n before end), labels left-joined;
    with labelled_only, the last_n newest samples that have a label (realised quality on the
    newest N truths, not on N samples of which only N minus the label delay are labelled).
    Read from the configured sample source; ``columns``: the features to read (None: all)."""
    bounds = WindowBounds(start, end, last_n, labelled_only)
    frame = sample_source().load(model=model, window=bounds, columns=columns).to_frame()
    if start is None:
        start = frame["timestamp"].min() if len(frame) else end
    return Window(frame, start, end)


class RelationalSampleSource:
    """The first sample source: PredictionSample left-joined with GroundTruth, in one query."""

    def load(
        self, *, model: RegisteredModel, window: WindowBounds, columns: Sequence[str] | None = None
    ) -> SampleColumns:
        kinds = _feature_kinds(model, columns)
        params: list[Any] = []
        names, select = _select_list(model, kinds, params)
        sql = _window_sql(
            model, ", ".join(select), params, window.start, window.end, window.last_n, window.labelled_only
        )
        frame = _typed(_fetch_frame(sql, params, names, _csv_dtypes(model, kinds)), model, kinds)
        return SampleColumns({name: _array(frame[name]) for name in frame.columns})


register_sample_source("relational", RelationalSampleSource)


def _feature_kinds(model: RegisteredModel, columns: Sequence[str] | None) -> Kinds:
    """The features to read with their types (an unknown type or feature name raises)."""
    types = model.feature_types
    unknown = [name for name in columns or [] if name not in types]
    if unknown:
        raise ValueError(f"not features of {model.name!r}: {unknown}")
    return {name: feature_type(types[name]) for name in (types if columns is None else columns)}


def _array(series: pd.Series) -> Any:
    # numpy where it can hold the values (no copy); pandas' own array for aware datetimes.
    return series.array if isinstance(series.dtype, pd.api.extensions.ExtensionDtype) else series.to_numpy()


def _window_sql(
    model: RegisteredModel,
    select: str,
    params: list[Any],
    start: datetime | None,
    end: datetime,
    last_n: int | None,
    labelled_only: bool = False,
) -> str:
    """The window's rows (predictions left-joined with labels); appends its parameters."""
    where = "s.model_id = %s AND s.timestamp < %s"
    params += [model.pk, _db_time(end)]
    if labelled_only:
        where += " AND g.id IS NOT NULL"
    if start is not None:
        where += " AND s.timestamp >= %s"
        params.append(_db_time(start))
    sql = (
        f"SELECT {select} FROM monitoring_predictionsample s "
        "LEFT JOIN monitoring_groundtruth g ON g.model_id = s.model_id AND g.sample_id = s.sample_id "
        f"WHERE {where}"
    )
    if last_n is not None:
        sql += " ORDER BY s.timestamp DESC, s.id DESC LIMIT %s"
        params.append(last_n)
    return sql


def window_label_count(
    *, model: RegisteredModel, start: datetime | None, end: datetime, last_n: int | None = None
) -> int:
    """How many of the window's samples have a label now (one cheap query, no rows fetched)."""
    return _window_count(model, "g.id", start, end, last_n)


def window_sample_count(
    *, model: RegisteredModel, start: datetime | None, end: datetime, last_n: int | None = None
) -> int:
    """How many samples the window holds (one cheap query on the sample index, either store)."""
    return _window_count(model, "s.id", start, end, last_n)


def _window_count(
    model: RegisteredModel, column: str, start: datetime | None, end: datetime, last_n: int | None
) -> int:
    """The window's rows whose ``column`` is not null, counted in the database."""
    params: list[Any] = []
    inner = _window_sql(model, f"{column} AS counted", params, start, end, last_n)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(counted) FROM ({inner}) w", params)
        return int(cursor.fetchone()[0])


def _db_time(value: datetime) -> Any:
    """Raw SQL bypasses the ORM's conversion; SQLite stores naive UTC text that must match."""
    return connection.ops.adapt_datetimefield_value(value)


def _csv_dtypes(model: RegisteredModel, kinds: Kinds) -> dict[str, str]:
    """Parse numbers as float64 in the C parser: far cheaper than strings converted later; each
    feature as its type's storage dtype."""
    dtypes = {name: _CSV_DTYPES.get(kind.storage_dtype, kind.storage_dtype) for name, kind in kinds.items()}
    floats = [PROBA_PREFIX + str(c) for c in model.classes]
    if not model.is_classification:
        floats += [PREDICTION, LABEL]
    return dtypes | {name: "float64" for name in floats}


def _fetch_frame(sql: str, params: list[Any], names: list[str], dtypes: dict[str, str]) -> pd.DataFrame:
    if connection.vendor != "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            return pd.DataFrame.from_records(cursor.fetchall(), columns=names)
    # COPY ... TO STDOUT + pandas' C CSV parser: ~5x faster than fetching 100,000 rows as tuples.
    connection.ensure_connection()
    buffer = io.BytesIO()
    with connection.connection.cursor() as cursor:
        with cursor.copy(f"COPY ({sql}) TO STDOUT WITH (FORMAT csv)", params) as copy:
            for block in copy:
                buffer.write(block)
    buffer.seek(0)
    if not buffer.getbuffer().nbytes:
        return pd.DataFrame(columns=names)
    # Only an empty unquoted field is NULL; "NA", "null" and friends stay category strings.
    dtype = {name: dtypes.get(name, "str") for name in names}
    return pd.read_csv(buffer, names=names, header=None, dtype=dtype, keep_default_na=False, na_values=[""])


def _typed(frame: pd.DataFrame, model: RegisteredModel, kinds: Kinds) -> pd.DataFrame:
    for name, kind in kinds.items():
        frame[name] = kind.column(frame[name])
    for cls in model.classes:
        frame[PROBA_PREFIX + str(cls)] = pd.to_numeric(frame[PROBA_PREFIX + str(cls)], errors="coerce")
    if model.is_classification:
        lookup = {str(c): c for c in model.classes}
        for col in (PREDICTION, LABEL):
            frame[col] = frame[col].map(lambda v: None if v is None else lookup.get(str(v), v))
    else:
        for col in (PREDICTION, LABEL):
            frame[col] = pd.to_numeric(frame[col], errors="coerce")
    frame["timestamp"] = pd.to_datetime(frame["timestamp"], utc=True, format="ISO8601")
    frame["label_received_at"] = pd.to_datetime(frame["label_received_at"], utc=True, format="ISO8601")
    return frame


def probability_matrix(frame: pd.DataFrame, classes: list[Any]) -> np.ndarray | None:
    """n × k probabilities in class order, or None unless every row logged all of them."""
    if not classes or len(frame) == 0:
        return None
    if any(PROBA_PREFIX + str(c) not in frame.columns for c in classes):
        return None  # e.g. a reference uploaded without probabilities (they are optional)
    matrix = frame[[PROBA_PREFIX + str(c) for c in classes]].to_numpy(dtype="float64")
    return None if np.isnan(matrix).any() else matrix


@dataclass(frozen=True)
class WindowSpec:
    spec: str
    start: datetime | None
    end: datetime
    last_n: int | None = None
    labelled_only: bool = False  # the last_n newest samples that have a label


def scheduled_window(policy: MonitoringPolicy, end: datetime) -> WindowSpec:
    if policy.window_kind == WindowKind.LABELLED:
        return WindowSpec(f"{policy.window_size}labelled", None, end, policy.window_size, labelled_only=True)
    if policy.window_kind == WindowKind.SAMPLES:
        return WindowSpec(f"{policy.window_size}samples", None, end, policy.window_size)
    return WindowSpec(f"{policy.window_size}h", end - timedelta(hours=policy.window_size), end)


def range_window(start: datetime, end: datetime) -> WindowSpec:
    return WindowSpec(f"range:{start.isoformat()}", start, end)


def parse_window_spec(spec: str, end: datetime) -> WindowSpec:
    """The inverse of WindowSpec.spec: "24h", "1000samples", "1000labelled" or "range:<iso start>"."""
    if spec.startswith("range:"):
        return range_window(datetime.fromisoformat(spec.removeprefix("range:")), end)
    if spec.endswith("labelled"):
        return WindowSpec(spec, None, end, int(spec.removesuffix("labelled")), labelled_only=True)
    if spec.endswith("samples"):
        return WindowSpec(spec, None, end, int(spec.removesuffix("samples")))
    if spec.endswith("h"):
        return WindowSpec(spec, end - timedelta(hours=int(spec.removesuffix("h"))), end)
    raise ValueError(f"unknown window spec {spec!r}")
