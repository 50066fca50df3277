"""The columnar store's whole-column validation (monitoring.store.columns) against the row path:
a request it passes becomes the same part columns the per-row cleaner builds; a bad value, or a
shape it leaves to the row path, hands the request to the row path (None), which names the row
and field; the first row of a repeated id is the one stored."""

import math
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from django.utils import timezone

from core.api import _row_spans
from core.batch import RowList, RowSpans, UnreadableRow, chunked_rows
from monitoring.models import PredictionSample, SamplePart
from monitoring.services import predictions_ingest
from monitoring.store.columns import SUM_MARGIN, columns_clean, typed_decoder
from monitoring.store.parts import part_read, part_schema, samples_batch
from monitoring.validation import SampleCleaner
from registry.schema import PROBABILITY_SUM_TOLERANCE, Collector, Schema
from tests.clock import at, iso
from tests.platform.conftest import make_model

DIM = 3
FEATURES = {"age": "numerical", "city": "categorical", "emb": "embedding", "review": "text"}
SPECS = {
    "age": {"name": "age", "type": "numerical"},
    "city": {"name": "city", "type": "categorical"},
    "emb": {"name": "emb", "type": "embedding", "dim": DIM, "missing": "allow"},
    "review": {"name": "review", "type": "text", "missing": "allow"},
}
CLASSIFIER = Schema("classification", FEATURES, ["no", "yes"], SPECS)
INT_CLASSES = Schema("classification", FEATURES, [0, 1], SPECS)
REGRESSOR = Schema("regression", FEATURES, [], SPECS)
NOW = at(days=1)


def _sample(i: int, **overrides: Any) -> dict[str, Any]:
    sample: dict[str, Any] = {
        "id": f"s{i}",
        "timestamp": iso(at(hours=i % 3)),
        "features": {"age": 30.5 + i, "city": "ab"[i % 2], "emb": [0.1 * i, 1.0, -2.5], "review": f"r{i}"},
        "prediction": ["no", "yes"][i % 2],
        "probabilities": {"no": 0.25, "yes": 0.75},
    }
    sample.update(overrides)
    return sample


def _features(i: int, **values: Any) -> dict[str, Any]:
    return {**_sample(i)["features"], **values}


def _cleaner(schema: Schema) -> SampleCleaner:
    return SampleCleaner.for_schema(schema, versions={1, 2}, now=NOW)


VERSION_IDS: dict[int | None, int | None] = {None: 40, 1: 41, 2: 42}


def _by_rows(schema: Schema, samples: list[Any]) -> pa.Table:
    """The part columns the row path builds (every row valid)."""
    cleaner, errors = _cleaner(schema), Collector()
    cleaned = [cleaner.clean(raw, i, errors) for i, raw in enumerate(samples)]
    assert not errors.errors and all(cleaned)
    versions = [VERSION_IDS[s.version] for s in cleaned if s]
    arrow = part_schema(schema)
    return pa.Table.from_batches([samples_batch(schema, arrow, [s for s in cleaned if s], versions)], arrow)


def _by_columns(schema: Schema, samples: list[Any]) -> pa.Table | None:
    chunks = columns_clean(RowList(samples), _cleaner(schema))
    if chunks is None:
        return None
    arrow = part_schema(schema)
    return pa.Table.from_batches([c.batch(arrow, VERSION_IDS) for c in chunks], arrow)


def _same(got: pa.Table, want: pa.Table) -> bool:
    """Equal schemas and values, NaN equal to NaN (Arrow's equals says a NaN is not)."""

    def plain(value: Any) -> Any:
        if isinstance(value, list):
            return [plain(v) for v in value]
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        return "NaN" if isinstance(value, float) and math.isnan(value) else value

    return got.schema == want.schema and plain(got.to_pylist()) == plain(want.to_pylist())


VALID = {
    "plain": [_sample(i) for i in range(5)],
    "integers where numbers go": [
        _sample(0, features=_features(0, age=41, emb=[1, 2, 3])),
        _sample(1, probabilities={"no": 0, "yes": 1}),
    ],
    "nulls and an absent feature that allows it": [
        _sample(0, features={"age": None, "city": None, "emb": None, "review": None}),
        _sample(1, features={"age": 3.0, "city": "a"}),
        _sample(2, probabilities=None),
        {k: v for k, v in _sample(3).items() if k != "probabilities"},
    ],
    "non-finite numbers (a parsed body may hold them)": [
        _sample(0, features=_features(0, age=math.inf)),
        _sample(1, features=_features(1, age=-math.inf)),
        _sample(2, features=_features(2, age=math.nan)),
    ],
    "some probabilities only": [
        _sample(0, probabilities={"yes": 0.5}),
        _sample(1, probabilities={"no": 0.1}),
    ],
    "timestamps of every kind": [
        _sample(0, timestamp=None),
        _sample(1, timestamp=at(hours=2).timestamp()),
        _sample(2, timestamp=int(at(hours=5).timestamp())),
        _sample(3, timestamp=iso(at(hours=1).astimezone(UTC), z=False)),
        _sample(4, timestamp=at(hours=1).astimezone(UTC).isoformat().replace("+00:00", "+05:30")),
    ],
    "integer ids and versions": [_sample(0, id=7, version=1), _sample(1, version=2), _sample(2, id=8)],
    "numbers as categories": [_sample(0, features=_features(0, city=12)), _sample(1)],
}


@pytest.mark.parametrize("samples", VALID.values(), ids=VALID.keys())
def test_a_valid_request_becomes_the_columns_the_row_path_builds(samples: list[Any]) -> None:
    got = _by_columns(CLASSIFIER, samples)
    assert got is not None, "the whole-column checks left a valid request to the row path"
    assert _same(got, _by_rows(CLASSIFIER, samples))


@pytest.mark.parametrize("schema", [INT_CLASSES, REGRESSOR], ids=["int classes", "regression"])
def test_other_targets_become_the_columns_the_row_path_builds(schema: Schema) -> None:
    if schema is REGRESSOR:
        samples = [_sample(i, prediction=[1.5, 2, -3e9][i], probabilities=None) for i in range(3)]
    else:
        samples = [
            _sample(i, prediction=["1", 0, 1][i], probabilities={"0": 0.5, "1": 0.5}) for i in range(3)
        ]
    got = _by_columns(schema, samples)
    assert got is not None
    assert _same(got, _by_rows(schema, samples))


LEFT_TO_ROWS = {
    "a bad number": _sample(2, features=_features(2, age="old")),
    "a boolean number": _sample(2, features=_features(2, age=True)),
    "a missing number": _sample(2, features={"city": "a", "emb": None, "review": None}),
    "an unknown feature": _sample(2, features=_features(2, zip="75")),
    "a long category": _sample(2, features=_features(2, city="x" * 1001)),
    "a short vector": _sample(2, features=_features(2, emb=[1.0])),
    "an unknown class": _sample(2, prediction="maybe"),
    "a null prediction": _sample(2, prediction=None),
    "a probability past 1": _sample(2, probabilities={"no": 1.2}),
    "a null probability": _sample(2, probabilities={"no": None}),
    "a boolean probability": _sample(2, probabilities={"no": True}),
    "empty probabilities": _sample(2, probabilities={}),
    "an unknown class's probability": _sample(2, probabilities={"maybe": 1.0}),
    "a sum over 1": _sample(2, probabilities={"no": 0.5, "yes": 0.7}),
    "a sum under 1": _sample(2, probabilities={"no": 0.2, "yes": 0.7}),
    "a bad timestamp": _sample(2, timestamp="yesterday"),
    "a naive timestamp": _sample(2, timestamp=iso(at(hours=4), tz=False)),
    "a future timestamp": _sample(2, timestamp=iso(NOW + timedelta(days=2))),
    "an empty id": _sample(2, id=""),
    "a long id": _sample(2, id="x" * 201),
    "a boolean id": _sample(2, id=True),
    "an unknown version": _sample(2, version=7),
    "a boolean version (the row path takes it)": _sample(2, version=True),
    "an unknown field": _sample(2, colour="red"),
    "a row that is no object": [1, 2],
}


@pytest.mark.parametrize("bad", LEFT_TO_ROWS.values(), ids=LEFT_TO_ROWS.keys())
def test_a_value_the_columns_do_not_pass_leaves_the_request_to_the_row_path(bad: Any) -> None:
    assert _by_columns(CLASSIFIER, [_sample(0), _sample(1), bad]) is None


@pytest.mark.parametrize("bound", [1 + PROBABILITY_SUM_TOLERANCE, 1 - PROBABILITY_SUM_TOLERANCE])
def test_a_probability_sum_at_a_bound_is_decided_by_the_row_path(bound: float) -> None:
    """numpy adds in class order, the row path in the client's key order: at a bound the last
    bit could decide, so that row goes to the row path; a little inside, the columns pass it."""
    at_bound = _sample(2, probabilities={"yes": 0.5, "no": bound - 0.5})
    assert _by_columns(CLASSIFIER, [_sample(0), at_bound]) is None
    inside = bound - 10 * SUM_MARGIN if bound > 1 else bound + 10 * SUM_MARGIN
    assert _by_columns(CLASSIFIER, [_sample(0), _sample(2, probabilities={"yes": 0.5, "no": inside - 0.5})])


def test_a_body_read_as_raw_spans_is_checked_the_same() -> None:
    import orjson

    body = orjson.dumps({"samples": VALID["nulls and an absent feature that allows it"]})
    spans = _row_spans(body, "samples", 100)
    assert isinstance(spans, RowSpans)
    rows = [raw for _, raw in chunked_rows(spans)]
    got = columns_clean(spans, _cleaner(CLASSIFIER))
    assert got is not None
    arrow = part_schema(CLASSIFIER)
    table = pa.Table.from_batches([c.batch(arrow, VERSION_IDS) for c in got], arrow)
    assert _same(table, _by_rows(CLASSIFIER, rows))


TABULAR_SPECS = {
    "age": {"name": "age", "type": "numerical"},
    "city": {"name": "city", "type": "categorical"},
    "zone code": {"name": "zone code", "type": "categorical", "missing": "allow"},
}
TABULAR = Schema(
    "classification", {n: s["type"] for n, s in TABULAR_SPECS.items()}, ["no", "yes"], TABULAR_SPECS
)
_ROW = '{{"id": "s{i}", "timestamp": "{ts}", "features": {{"age": {age}, "city": "{city}", "zone code": null}}, "prediction": "no"}}'


def _rows_text(*rows: str) -> bytes:
    """A body whose rows are written as JSON text: what a client may send that Python's objects
    cannot show (a repeated key, an escaped key, a 40-digit integer)."""
    plain = [_ROW.format(i=i, ts=iso(at(hours=i % 3)), age=30.5 + i, city="abc"[i]) for i in range(3)]
    return ('{"samples": [' + ", ".join(plain + list(rows)) + "]}").encode()


TS = iso(at(hours=1))
TEXT_ROWS = {
    "plain": "",
    "integers, exponents, minus zero": f'{{"id": 9, "timestamp": "{TS}", "features": {{"age": -0, "city": "b", "zone code": null}}, "prediction": "yes", "probabilities": {{"no": 0, "yes": 1e0}}, "version": 2}}',
    "a 23-digit number and a tiny one": f'{{"id": "n", "timestamp": "{TS}", "features": {{"age": 12345678901234567890123, "city": "b", "zone code": "z"}}, "prediction": "no", "probabilities": {{"no": 5e-324}}}}',
    "a repeated key: the last one counts": f'{{"id": "r", "timestamp": "{TS}", "features": {{"age": 1, "age": 2, "city": "x", "city": "y", "zone code": "z"}}, "prediction": "no", "prediction": "yes"}}',
    "escaped keys and values": f'{{"\\u0069d": "\\u00e9\\ud83d\\ude00", "timestamp": "{TS}", "features": {{"\\u0061ge": 3, "city": "caf\\u00e9", "zone\\u0020code": "\\n"}}, "prediction": "n\\u006f"}}',
    "an absent feature": f'{{"id": "a", "timestamp": "{TS}", "features": {{"age": 3, "city": "b"}}, "prediction": "no"}}',
    "a timestamp in epoch seconds": f'{{"id": "e", "timestamp": {at(hours=2).timestamp()}, "features": {{"age": 3, "city": "b", "zone code": "z"}}, "prediction": "no"}}',
    "an id past 64 bits (orjson reads a float)": f'{{"id": 123456789012345678901234567890, "timestamp": "{TS}", "features": {{"age": 3, "city": "b", "zone code": "z"}}, "prediction": "no"}}',
    "a version past 64 bits": f'{{"id": "v", "version": 18446744073709551616, "timestamp": "{TS}", "features": {{"age": 3, "city": "b", "zone code": "z"}}, "prediction": "no"}}',
    "a boolean number": f'{{"id": "b", "timestamp": "{TS}", "features": {{"age": true, "city": "b", "zone code": "z"}}, "prediction": "no"}}',
    "a number as a category": f'{{"id": "c", "timestamp": "{TS}", "features": {{"age": 1, "city": 12, "zone code": "z"}}, "prediction": "no"}}',
    "a missing feature": f'{{"id": "m", "timestamp": "{TS}", "features": {{"city": "b", "zone code": "z"}}, "prediction": "no"}}',
    "an unknown feature": f'{{"id": "u", "timestamp": "{TS}", "features": {{"age": 1, "city": "b", "zone code": "z", "zip": 7}}, "prediction": "no"}}',
    "an unknown field": f'{{"id": "u", "colour": "red", "timestamp": "{TS}", "features": {{"age": 1, "city": "b", "zone code": "z"}}, "prediction": "no"}}',
    "null features": f'{{"id": "f", "timestamp": "{TS}", "features": null, "prediction": "no"}}',
    "a long category": f'{{"id": "l", "timestamp": "{TS}", "features": {{"age": 1, "city": "{"é" * 1001}", "zone code": "z"}}, "prediction": "no"}}',
    "a number past float64": f'{{"id": "o", "timestamp": "{TS}", "features": {{"age": 1e400, "city": "b", "zone code": "z"}}, "prediction": "no"}}',
    "a NaN token": f'{{"id": "o", "timestamp": "{TS}", "features": {{"age": NaN, "city": "b", "zone code": "z"}}, "prediction": "no"}}',
    "a lone surrogate": f'{{"id": "\\ud800", "timestamp": "{TS}", "features": {{"age": 1, "city": "b", "zone code": "z"}}, "prediction": "no"}}',
    "nested past the types": f'{{"id": "d", "timestamp": "{TS}", "features": {{"age": 1, "city": "b", "zone code": "z"}}, "prediction": [[["no"]]]}}',
}


def _columns_or_error(rows: Any) -> Any:
    try:
        chunks = columns_clean(rows, _cleaner(TABULAR))
    except UnreadableRow:
        return "unreadable"
    if chunks is None:
        return None
    arrow = part_schema(TABULAR)
    return pa.Table.from_batches([c.batch(arrow, VERSION_IDS) for c in chunks], arrow)


@pytest.mark.parametrize("row", TEXT_ROWS.values(), ids=TEXT_ROWS.keys())
def test_typed_rows_answer_as_the_rows_objects_do(row: str) -> None:
    """A body's rows decoded typed (msgspec, straight from the spans) give the same columns as
    the same rows decoded into objects (orjson) and checked a column at a time, or the same
    hand-over to the row path, or the same unreadable row, on bodies written as text."""
    import orjson

    body = _rows_text(row) if row else _rows_text()
    spans = _row_spans(body, "samples", 100)
    if spans is None:  # parsed whole by core.api, as orjson cannot read it: no row is decoded typed
        with pytest.raises(orjson.JSONDecodeError):
            orjson.loads(body)
        return
    try:
        objects: Any = RowList(orjson.loads(body)["samples"])
    except orjson.JSONDecodeError:
        objects = None
    typed, want = _columns_or_error(spans), "unreadable" if objects is None else _columns_or_error(objects)
    if isinstance(want, pa.Table):
        assert isinstance(typed, pa.Table) and _same(typed, want)
    else:
        assert typed == want


def test_valid_rows_are_read_by_the_typed_decoder() -> None:
    """The valid bodies above are read typed (not handed to the objects' way), those with a value
    of another type not, and a schema with a feature of another kind has no typed decoder."""
    decoder = typed_decoder(TABULAR)
    assert decoder is not None
    valid = ["plain", "integers, exponents, minus zero", "a 23-digit number and a tiny one"]
    valid += [
        "a repeated key: the last one counts",
        "escaped keys and values",
        "a timestamp in epoch seconds",
        "a long category",  # read typed, then refused by the column tests as before
    ]
    for name, row in TEXT_ROWS.items():
        spans = _row_spans(_rows_text(row) if row else _rows_text(), "samples", 100)
        if spans is None:  # a body orjson cannot read is parsed whole (core.api), not as spans
            continue
        read = decoder.decode(spans, range(len(spans)))
        assert (read is not None) == (name in valid), name
    assert typed_decoder(CLASSIFIER) is None  # an embedding and a text feature


@pytest.mark.django_db
def test_a_repeated_id_stores_its_first_row_in_id_order(settings: Any, tmp_path: Path) -> None:
    settings.MEDIA_ROOT, settings.DRIFTWATCH_SAMPLE_SOURCE = str(tmp_path), "columnar"
    model = make_model()
    first = {"id": "b", "timestamp": iso(at(hours=4)), "features": {"age": 1.0, "income": 2.0, "city": "x"}}
    again = {**first, "features": {"age": 9.0, "income": 9.0, "city": "y"}}
    other = {**first, "id": "a"}
    result = predictions_ingest(
        model=model, body={"samples": [{**s, "prediction": "no"} for s in (first, again, other)]}
    )
    assert (result.accepted, result.duplicates) == (2, 1)
    (part,) = SamplePart.objects.filter(model=model)
    table = part_read(part.name)
    assert table.column("sample_id").to_pylist() == ["a", "b"]
    assert table.column("feature:age").to_pylist() == [1.0, 1.0]
    assert table.column("feature:city").to_pylist() == ["x", "x"]
    index = PredictionSample.objects.filter(model=model).order_by("sample_id")
    assert [(s.sample_id, s.part_row, s.prediction) for s in index] == [("a", 0, "no"), ("b", 1, "no")]
    assert timezone.is_aware(index[0].timestamp)


@pytest.mark.django_db
def test_index_rows_are_the_same_copied_or_inserted_on_conflict(settings: Any, tmp_path: Path) -> None:
    """On PostgreSQL a request none of whose ids is stored has its index rows copied (binary COPY,
    monitoring.store.pgcopy), and one with a stored id inserted ON CONFLICT DO NOTHING: the same
    rows either way (ids and classes with multi-byte and escaped characters, NULL and set versions,
    microseconds, two hours' parts)."""
    from registry.services import version_create

    settings.MEDIA_ROOT, settings.DRIFTWATCH_SAMPLE_SOURCE = str(tmp_path), "columnar"
    classes = ['no "quote"', "yés\\back\tslash", "日本"]
    fresh, seen = make_model(name="fresh", classes=classes), make_model(name="seen", classes=classes)
    versions = {m.pk: version_create(model=m) for m in (fresh, seen)}
    ids = ["é-1", "tab\tnew\nline", "back\\slash", "日本語" * 20, "plain", "z" * 200]
    samples = [
        {
            "id": sample_id,
            "timestamp": (at(hours=i % 2, seconds=i) + timedelta(microseconds=123457 * i)).isoformat(),
            "features": {"age": float(i), "income": None, "city": "a"},
            "prediction": classes[i % 3],
            **({"version": 1} if i % 2 else {}),
        }
        for i, sample_id in enumerate(ids)
    ]
    predictions_ingest(model=seen, body={"samples": samples[:1]})
    assert predictions_ingest(model=fresh, body={"samples": samples}).accepted == len(ids)
    assert predictions_ingest(model=seen, body={"samples": samples}).accepted == len(ids) - 1

    def index(model: Any) -> list[tuple[Any, ...]]:
        rows = PredictionSample.objects.filter(model=model).select_related("part").order_by("sample_id")
        return [
            (
                s.sample_id,
                s.timestamp,
                s.version_id == versions[model.pk].pk,
                s.prediction,
                s.received_at is not None,
                s.part.bucket,
                s.part_row,
            )
            for s in rows
        ]

    got = index(fresh)
    again = [r for r in got if r[0] != ids[0]]  # its first request stored "seen"'s first sample
    assert again == [r for r in index(seen) if r[0] != ids[0]]
    assert [r[0] for r in got] == sorted(ids)
    by_id = {s["id"]: s for s in samples}
    for sample_id, ts, _, prediction, *_ in got:
        assert ts == datetime.fromisoformat(by_id[sample_id]["timestamp"])
        assert prediction == by_id[sample_id]["prediction"]
    assert {r[5] for r in got} == {at(), at(hours=1)}
