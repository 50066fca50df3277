"""The columnar store's validation: a request's samples checked a column at a time.

Each field of a chunk of rows becomes one list, passed by a few whole-column tests (the set of
its value types, numpy's finite and range tests, the distinct values looked up once) and built
straight into its Arrow column. The row path (``SampleCleaner``) made about 40 Python calls a
sample and then built the same columns from its objects (10,000 samples of 8 features: 0.25 s of
a 0.38 s request, against 0.03 s here).

Anything those tests do not pass returns None, and the caller validates the request row by row
as before: a bad value, which that path names with every other bad row and field, but also a
valid shape they leave to it (a boolean category, a boolean version). So both paths answer the
same, and a request they accept is stored the same (tests/platform/monitoring/test_columns.py).
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from itertools import chain
from typing import Any, TypeVar

import numpy as np
import orjson
import pyarrow as pa

from core.batch import Rows, chunks
from monitoring.store.parts import FEATURE, feature_array, part_schema, text_value
from monitoring.validation import MAX_ID_LENGTH, SAMPLE_KEYS, SampleCleaner, clean_timestamp
from registry.schema import PROBABILITY_SUM_TOLERANCE, Collector, clean_target
from workers.features import MISSING, FeatureKind
from workers.features.categorical import MAX_CATEGORY_CHARS, Categorical
from workers.features.numerical import Numerical

T = TypeVar("T")
NoneType = type(None)
NUMBERS = frozenset({float, int})  # exact types: a JSON true is a bool, never a number here
# A probability sum this close to a bound is decided by the row path: numpy adds a row's
# probabilities in class order, the row path in the client's key order (the last bits can differ).
SUM_MARGIN = 1e-9


class _Refused(Exception):
    """A column the whole-column tests do not pass: the request is validated row by row."""


def _need(condition: bool) -> None:
    if not condition:
        raise _Refused


@dataclass
class ColumnChunk:
    """A chunk of valid samples in request order: the part's columns but its version ids (the
    versions as sent, which the store maps), and what the index rows take as Python values."""

    sample_ids: list[str]
    times: list[datetime]
    timestamps: pa.Array
    versions: list[int | None]
    predictions: pa.Array
    prediction_json: list[str]
    payload: list[pa.Array]  # the part schema's proba:* then feature:* columns

    def batch(self, arrow: pa.Schema, version_ids: dict[int | None, int | None]) -> pa.RecordBatch:
        versions = pa.array([version_ids[v] for v in self.versions], pa.int64())
        ids = pa.array(self.sample_ids, pa.string())
        columns = [ids, self.timestamps, versions, self.predictions, *self.payload]
        return pa.RecordBatch.from_arrays(columns, schema=arrow)


def columns_clean(rows: Rows, cleaner: SampleCleaner) -> list[ColumnChunk] | None:
    """The whole request as column chunks, or None: validate it row by row (``SampleCleaner``)."""
    checks = _Columns(cleaner)
    try:
        return [checks.chunk(rows.load(chunk)) for chunk in chunks(range(len(rows)))]
    except (_Refused, TypeError, ValueError, OverflowError):
        # TypeError: an unhashable value looked up; ValueError/OverflowError: a value numpy or
        # Arrow cannot hold (an int past float64). The row path answers those as it always did.
        return None


@dataclass
class _Columns:
    cleaner: SampleCleaner
    arrow: pa.Schema = field(init=False)
    # Distinct timestamps and predictions cleaned once per request, by type and value (1 == True).
    times: dict[type, dict[Any, datetime]] = field(default_factory=dict)
    targets: dict[type, dict[Any, tuple[Any, str]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.arrow = part_schema(self.cleaner.schema)

    def chunk(self, raws: list[Any]) -> ColumnChunk:
        _need(all(type(r) is dict and r.keys() <= SAMPLE_KEYS for r in raws))
        predictions, prediction_json = self.predictions([r.get("prediction") for r in raws])
        times = _each_distinct([r.get("timestamp") for r in raws], self.times, self._timestamp)
        return ColumnChunk(
            sample_ids=_ids([r.get("id") for r in raws]),
            times=times,
            timestamps=pa.array(times, self.arrow.field("timestamp").type),
            versions=self.versions([r.get("version") for r in raws]),
            predictions=predictions,
            prediction_json=prediction_json,
            payload=self.probabilities([r.get("probabilities") for r in raws])
            + self.features([r.get("features") for r in raws]),
        )

    def _timestamp(self, value: Any) -> datetime:
        ts = clean_timestamp(value, 0, Collector(), self.cleaner.now)
        _need(ts is not None)
        return ts  # type: ignore[return-value]  # not None: _need

    def versions(self, values: list[Any]) -> list[int | None]:
        _need(set(map(type, values)) <= {NoneType, int})
        _need(set(values) - {None} <= self.cleaner.versions)
        return values

    def predictions(self, values: list[Any]) -> tuple[pa.Array, list[str]]:
        schema = self.cleaner.schema
        if not schema.is_classification:
            _need(set(map(type, values)) <= NUMBERS)
            column = pa.array(values, pa.float64())
            _need(bool(np.isfinite(column.to_numpy()).all()))
            return column, [orjson.dumps(v).decode() for v in values]
        cleaned = _each_distinct(values, self.targets, self._class)
        return pa.array([text for text, _ in cleaned], pa.string()), [js for _, js in cleaned]

    def _class(self, value: Any) -> tuple[Any, str]:
        ok, label = clean_target(
            value, 0, Collector(), self.cleaner.schema, "prediction", self.cleaner.lookup
        )
        _need(ok)
        return text_value(label), orjson.dumps(label).decode()

    def probabilities(self, values: list[Any]) -> list[pa.Array]:
        classes = self.cleaner.schema.classes
        types = set(map(type, values))
        if not self.cleaner.schema.is_classification or dict not in types:
            _need(types == {NoneType})
            return [pa.nulls(len(values), pa.float64()) for _ in classes]
        _need(types <= {dict, NoneType})
        return _probability_columns(values, [str(c) for c in classes])

    def features(self, values: list[Any]) -> list[pa.Array]:
        _need(set(map(type, values)) == {dict})
        kinds = self.cleaner.schema.feature_kinds
        names = list(kinds)
        if any(f.keys() != kinds.keys() for f in values):
            # A feature registered with "missing": "allow" may be left out (read as null).
            absent_ok = {n for n, k in kinds.items() if MISSING in k.options and k.allows_missing}
            _need(all(f.keys() <= kinds.keys() and kinds.keys() - f.keys() <= absent_ok for f in values))
        columns = [[f.get(name) for f in values] for name in names]
        types = [self.arrow.field(FEATURE + name).type for name in names]
        return [_feature_column(k, t, c) for k, t, c in zip(kinds.values(), types, columns, strict=True)]


def _each_distinct(values: list[Any], cache: dict[type, dict[Any, T]], clean: Callable[[Any], T]) -> list[T]:
    """``clean`` of each value, called once per distinct value of each type in the request (by
    type: 1, 1.0 and True are equal keys, and the row path tells them apart)."""
    types = set(map(type, values))
    for kind in types:
        known = cache.setdefault(kind, {})
        for value in {v for v in values if type(v) is kind} - known.keys():
            known[value] = clean(value)
    if len(types) == 1:
        return list(map(cache[types.pop()].__getitem__, values))
    return [cache[type(v)][v] for v in values]


def _ids(values: list[Any]) -> list[str]:
    types = set(map(type, values))
    _need(types <= {str, int})
    texts = values if types == {str} else [str(v) for v in values]
    lengths = list(map(len, texts))
    _need(min(lengths) >= 1 and max(lengths) <= MAX_ID_LENGTH)
    return texts


def _probability_columns(values: list[dict[str, Any] | None], keys: list[str]) -> list[pa.Array]:
    """Each class's probability column (null where a row has none): every value a number in
    [0, 1], each row's sum at most 1, and at least 1 where it names every class (both within
    the tolerance)."""
    given = [v for v in values if v is not None]
    known = set(keys)
    _need(len(known) == len(keys))  # two classes with one string form: left to the row path
    _need(all(v and v.keys() <= known for v in given))
    _need(set(map(type, chain.from_iterable(map(dict.values, given)))) <= NUMBERS)
    # Given rows first: a row's probabilities as one column each (NaN: that class not named).
    matrix = np.array([[v.get(k, np.nan) for v in given] for k in keys], dtype="float64").reshape(
        len(keys), -1
    )
    absent = np.isnan(matrix)
    sizes = np.fromiter(map(len, given), dtype="int64", count=len(given))
    _need(bool(((~absent).sum(axis=0) == sizes).all()))  # a NaN sent as a probability: refused there
    present = matrix[~absent]
    _need(bool(((present >= 0.0) & (present <= 1.0)).all()))
    totals = np.nansum(matrix, axis=0)
    complete = sizes == len(keys)
    _need(bool((totals <= 1 + PROBABILITY_SUM_TOLERANCE - SUM_MARGIN).all()))
    _need(bool((totals[complete] >= 1 - PROBABILITY_SUM_TOLERANCE + SUM_MARGIN).all()))
    if len(given) < len(values):  # rows without probabilities: null in every class
        rows = np.flatnonzero([v is not None for v in values])
        full = np.full((len(keys), len(values)), np.nan)
        full[:, rows] = matrix
        matrix, absent = full, np.isnan(full)
    return [pa.array(matrix[j], mask=absent[j]) for j in range(len(keys))]


def _feature_column(kind: FeatureKind[Any], type_: pa.DataType, values: list[Any]) -> pa.Array:
    types = set(map(type, values))
    _need(NoneType not in types or kind.allows_missing)
    if type(kind) is Numerical and types <= NUMBERS | {NoneType}:
        if NoneType in types:
            values = [np.nan if v is None else v for v in values]
        numbers = np.fromiter(values, "float64", len(values))
        numbers[~np.isfinite(numbers)] = np.nan  # non-finite counts as missing, as the row path stores it
        return pa.array(numbers)
    if type(kind) is Categorical and types <= {str, NoneType}:
        _need(max((len(v) for v in values if v is not None), default=0) <= MAX_CATEGORY_CHARS)
        return pa.array(values, pa.string())
    return feature_array(kind, type_, _cleaned(kind, values))


def _cleaned(kind: FeatureKind[Any], values: Sequence[Any]) -> list[Any]:
    """Any other type, or these with other values (a number as a category): its own ``clean``
    per value, which raises InvalidValue (a ValueError) for a value the row path names."""
    clean = kind.clean
    return [None if v is None else clean(v) for v in values]
