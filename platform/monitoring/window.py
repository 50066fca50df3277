"""Loads one window of predictions, joined with their labels, as flat columns (one SQL query).

Feature values, predictions, probabilities and labels are extracted from JSON in the database
(->> on PostgreSQL, json_extract on SQLite), so no per-row JSON parsing happens in Python.
"""

import io
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import numpy as np
import pandas as pd
from django.db import connection

from monitoring.models import MonitoringPolicy, WindowKind
from registry.models import RegisteredModel
from registry.reference import LABEL, PREDICTION, PROBA_PREFIX, WINDOW_COLUMNS


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


def _select_list(model: RegisteredModel, params: list[Any]) -> tuple[list[str], list[str]]:
    names, sql = [], []
    for name in model.feature_types:
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
) -> Window:
    """Samples with start <= timestamp < end (or the last_n before end), labels left-joined;
    with labelled_only, the last_n newest samples that have a label (realised quality on the
    newest N truths, not on N samples of which only N minus the label delay are labelled)."""
    params: list[Any] = []
    names, columns = _select_list(model, params)
    sql = _window_sql(model, ", ".join(columns), params, start, end, last_n, labelled_only)
    frame = _typed(_fetch_frame(sql, params, names, _csv_dtypes(model)), model)
    if start is None:
        start = frame["timestamp"].min() if len(frame) else end
    return Window(frame, start, end)


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
    params: list[Any] = []
    inner = _window_sql(model, "g.id AS label_id", params, start, end, last_n)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(label_id) FROM ({inner}) w", params)
        return int(cursor.fetchone()[0])


def _db_time(value: datetime) -> Any:
    """Raw SQL bypasses the ORM's conversion; SQLite stores naive UTC text that must match."""
    return connection.ops.adapt_datetimefield_value(value)


def _csv_dtypes(model: RegisteredModel) -> dict[str, str]:
    """Parse numbers as float64 in the C parser: far cheaper than strings converted later."""
    floats = [n for n, t in model.feature_types.items() if t == "numerical"]
    floats += [PROBA_PREFIX + str(c) for c in model.classes]
    if not model.is_classification:
        floats += [PREDICTION, LABEL]
    return {name: "float64" for name in floats}


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


def _typed(frame: pd.DataFrame, model: RegisteredModel) -> pd.DataFrame:
    for name, kind in model.feature_types.items():
        if kind == "numerical":
            frame[name] = pd.to_numeric(frame[name], errors="coerce").astype("float64")
        else:
            frame[name] = frame[name].astype("object").where(frame[name].notna(), None)
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
