"""Loads one window of predictions, joined with their labels, as flat columns.

``window_load`` asks the configured sample source (``monitoring.samples``; the columnar store's
is ``monitoring.store.source``). The window's counts are answered here, on the sample index.
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import numpy as np
import pandas as pd
from django.db import connection

from monitoring.models import MonitoringPolicy, WindowKind
from monitoring.samples import (
    DeferredFeatures,
    WindowBounds,
    sample_source,
    source_load,
)
from registry.models import RegisteredModel
from registry.reference import PROBA_PREFIX
from registry.schema import model_schema
from workers.drift.summary import ColumnCounts
from workers.features import FeatureKind

Kinds = dict[str, FeatureKind[Any]]


@dataclass
class Window:
    frame: pd.DataFrame  # features (schema names), PREDICTION, LABEL, PROBA_PREFIX+class, version, times
    start: datetime
    end: datetime
    # Features not in ``frame``, read one at a time when asked for (a very large window's).
    deferred: DeferredFeatures | None = None
    # Counted features' counts over the whole window, from the parts' per-hour summaries
    # (``window_load(counted=True)`` over whole hours): their tests need not read them.
    counts: dict[str, ColumnCounts] = field(default_factory=dict)
    # A fanned-out check's merged slices (monitoring.fanout): order-free features' values in
    # another order (sorted, missing last), made when asked for and read by their tests in place
    # of the column (``tested``), and the PCA's (sum of the rows' errors, rows).
    merged: dict[str, Callable[[], pd.Series]] = field(default_factory=dict)
    pca_sums: tuple[float, int] | None = None

    def tested(self, name: str) -> pd.Series:
        """What a feature's own tests read: its merged values (made now), or its column."""
        return self.merged[name]() if name in self.merged else self.feature(name)

    def has(self, name: str) -> bool:
        return name in self.frame.columns or (self.deferred is not None and name in self.deferred.names)

    def feature(self, name: str) -> pd.Series:
        """A feature's column: the frame's own, or read now (a new array each call: hold it while
        it is worked on, and let it go)."""
        if name not in self.frame.columns and self.deferred is not None and name in self.deferred.names:
            return pd.Series(self.deferred.read(name), index=self.frame.index, name=name, copy=False)
        return self.frame[name]  # a name it does not have raises KeyError here

    def with_features(self, names: Sequence[str], *, categorical: bool = False) -> pd.DataFrame:
        """The frame with these features in it (read, where they are deferred); ``categorical``:
        a deferred feature the source holds dictionary-encoded comes as a pandas Categorical
        (for the PCA's frequency encoding: 20 categorical columns of 1M rows typed as Python
        objects, then factorized again, were most of a check taken from the hours' summaries)."""
        if all(name in self.frame.columns for name in names):
            return self.frame
        added = {name: self._deferred(name, categorical) for name in names if name not in self.frame.columns}
        return pd.concat([self.frame, pd.DataFrame(added, index=self.frame.index)], axis=1, copy=False)

    def _deferred(self, name: str, categorical: bool) -> pd.Series:
        found = self.deferred.category(name) if categorical and self.deferred is not None else None
        if found is None:
            return self.feature(name)
        return pd.Series(found, index=self.frame.index, name=name, copy=False)

    def block(self, start: int, stop: int, names: Sequence[str]) -> pd.DataFrame:
        """Rows [start, stop) of the frame with these features in it, a deferred one read for
        those rows alone (where its source can)."""
        frame = self.frame.iloc[start:stop]
        added = {
            name: self.deferred.read_rows(name, start, stop)
            for name in names
            if name not in frame.columns and self.deferred is not None
        }
        if not added:
            return frame
        return pd.concat([frame, pd.DataFrame(added, index=frame.index)], axis=1, copy=False)

    def rows(self, mask: np.ndarray) -> "Window":
        """The window of these rows (a boolean mask over them), deferred features included (the
        whole window's counts and merged measures are not theirs: left out)."""
        deferred = None if self.deferred is None else self.deferred.rows(np.flatnonzero(mask))
        return Window(self.frame[mask], self.start, self.end, deferred)


def window_load(
    *,
    model: RegisteredModel,
    start: datetime | None,
    end: datetime,
    last_n: int | None = None,
    labelled_only: bool = False,
    columns: Sequence[str] | None = None,
    defer_above: int | None = None,
    counted: bool = False,
    labels: Any = None,
) -> Window:
    """Samples with start <= timestamp < end (or the last_n before end), labels left-joined;
    with labelled_only, the last_n newest samples that have a label (realised quality on the
    newest N truths, not on N samples of which only N minus the label delay are labelled).
    Read from the configured sample source; ``columns``: the features to read (None: all);
    ``defer_above``: past that many rows the source may leave the features to be read one at a
    time (``Window.feature``); ``counted``: the source may give counted features as their
    counts over the window (``Window.counts``, from per-hour summaries) and read them only when
    asked for; ``labels``: the labels placed on the window's rows already, for a source that
    takes them (the columnar source's ``PlacedLabels``)."""
    bounds = WindowBounds(start, end, last_n, labelled_only)
    loaded = source_load(
        sample_source(),
        model=model,
        window=bounds,
        columns=columns,
        defer_above=defer_above,
        counted=counted,
        labels=labels,
    )
    frame = loaded.to_frame()
    if start is None:
        start = frame["timestamp"].min() if len(frame) else end
    return Window(frame, start, end, loaded.deferred, loaded.counts)


def _feature_kinds(model: RegisteredModel, columns: Sequence[str] | None) -> Kinds:
    """The features to read with their types, bound to their options (an embedding's dim); an
    unknown type or feature name raises."""
    kinds = model_schema(model).feature_kinds
    unknown = [name for name in columns or [] if name not in kinds]
    if unknown:
        raise ValueError(f"not features of {model.name!r}: {unknown}")
    return kinds if columns is None else {name: kinds[name] for name in columns}


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


# A label carries its prediction's timestamp (``sample_at``), so the window's labels are a range
# scan of the labels alone; a label that came before its prediction (``sample_at`` still NULL
# until the compaction task's labels_meet_predictions) is found through the predictions, on the
# partial index of waiting labels. They are placed on the window's rows by sample id, so a
# compaction or an ingestion committing between the parts' listing and this read changes
# nothing: the ids do not move. (Joined to the index rows, 500,000 labels of a 1M window took
# 0.85-1.0 s in PostgreSQL, a hash join spilling to disk; by range 0.32 s, placed in 0.18 s.)
LABELS_IN_RANGE = """
SELECT g.sample_id, g.label, COALESCE(g.labelled_at, g.received_at) AS known, g.sample_at AS at
FROM monitoring_groundtruth g
WHERE g.model_id = %s AND g.sample_at < %s {since_label} {share}
UNION ALL
SELECT g.sample_id, g.label, COALESCE(g.labelled_at, g.received_at), s.timestamp FROM monitoring_groundtruth g
JOIN monitoring_predictionsample s ON s.model_id = g.model_id AND s.sample_id = g.sample_id
WHERE g.model_id = %s AND g.sample_at IS NULL AND s.timestamp < %s {since_sample} {share}
"""
# One of several statements that read a window's labels together: (k, n) takes the labels whose
# id is k modulo n (None: all of them).
Share = tuple[int, int] | None


def labels_in_range_sql(
    model: RegisteredModel, start: datetime | None, end: datetime, params: list[Any], share: Share = None
) -> str:
    since_label = since_sample = ""
    params += [model.pk, _db_time(end)]
    if start is not None:
        since_label = "AND g.sample_at >= %s"
        params.append(_db_time(start))
    params += [model.pk, _db_time(end)]
    if start is not None:
        since_sample = "AND s.timestamp >= %s"
        params.append(_db_time(start))
    part = f"AND mod(g.id, {int(share[1])}) = {int(share[0])}" if share is not None else ""
    return LABELS_IN_RANGE.format(since_label=since_label, since_sample=since_sample, share=part)


def window_label_count(
    *, model: RegisteredModel, start: datetime | None, end: datetime, last_n: int | None = None
) -> int:
    """How many of the window's samples have a label now (one cheap query, no rows fetched). A
    time range counts its labels by their predictions' timestamps, as the columnar source reads
    them (a scan of the labels' index: a 10M window's 5,000,000 labels joined to its samples took
    3.4 s); the last N samples are found by joining."""
    if last_n is not None:
        return _window_count(model, "g.id", start, end, last_n)
    params: list[Any] = []
    sql = f"SELECT count(*) FROM ({labels_in_range_sql(model, start, end, params)}) w"
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return int(cursor.fetchone()[0])


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


def probability_matrix(frame: pd.DataFrame, classes: list[Any]) -> np.ndarray | None:
    """n × k probabilities in class order, or None unless every row logged all of them."""
    if not classes or len(frame) == 0:
        return None
    if any(PROBA_PREFIX + str(c) not in frame.columns for c in classes):
        return None  # e.g. a reference uploaded without probabilities (they are optional)
    # Each column written into the matrix's own row of a (k, n) array, handed over transposed: the
    # (n, k) values and layout that DataFrame.to_numpy gives, without its take of the columns and
    # its interleave (5,000,000 labelled rows of a 10M window: 0.43 s, against 0.05 s).
    matrix = np.empty((len(classes), len(frame)), dtype="float64")
    for row, c in zip(matrix, classes, strict=True):
        row[:] = frame[PROBA_PREFIX + str(c)].to_numpy(dtype="float64")
    matrix = matrix.T
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
