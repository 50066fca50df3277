"""Reference (baseline) rows: validation, CSV parsing, and the Parquet layout they are stored in.

Columns: one per feature (its own name), then LABEL, PREDICTION and PROBA_PREFIX + class.
"""

import csv
import io
from typing import Any

import pandas as pd
from django.conf import settings

from core.errors import FieldError, InvalidInput
from registry.schema import (
    Collector,
    Schema,
    clean_features,
    clean_probabilities,
    clean_target,
)
from workers.features import InvalidValue

LABEL = "__label__"
PREDICTION = "__prediction__"
PROBA_PREFIX = "__proba__:"
# The window's own columns beside the features: no feature may take one of these names.
WINDOW_COLUMNS = ("sample_id", "version_id", "timestamp", "label_received_at")
REFERENCE_KEYS = frozenset({"features", "label", "prediction", "probabilities"})


def clean_reference_rows(rows: list[Any], schema: Schema) -> pd.DataFrame:
    cap = settings.DRIFTWATCH_MAX_REFERENCE_ROWS
    if len(rows) > cap:
        raise InvalidInput([FieldError(None, "rows", f"at most {cap} reference rows, got {len(rows)}")])
    errors = Collector()
    lookup = schema.class_lookup()
    records: list[dict[str, Any]] = []
    for i, raw in enumerate(rows):
        shape = "{features, label, prediction?, probabilities?}"
        if not errors.check_object(raw, i, allowed=REFERENCE_KEYS, what="row", shape=shape):
            continue
        features = clean_features(raw.get("features"), i, errors, schema)
        ok_label, label = clean_target(raw.get("label"), i, errors, schema, "label", lookup)
        record = dict(features or {}, **{LABEL: label})
        ok = features is not None and ok_label
        if raw.get("prediction") is not None:
            ok_pred, record[PREDICTION] = clean_target(
                raw["prediction"], i, errors, schema, "prediction", lookup
            )
            ok = ok and ok_pred
        if raw.get("probabilities") is not None and schema.is_classification:
            ok_proba, proba = clean_probabilities(raw["probabilities"], i, errors, lookup)
            ok = ok and ok_proba
            for key, p in (proba or {}).items():
                record[PROBA_PREFIX + key] = p
        if ok:
            records.append(record)
    errors.raise_if_any()
    return _frame(records, schema)


def _frame(records: list[dict[str, Any]], schema: Schema) -> pd.DataFrame:
    frame = pd.DataFrame.from_records(records)
    for name, kind in schema.feature_kinds.items():
        frame[name] = kind.column(frame[name])
    return frame


def csv_to_rows(text: str, schema: Schema) -> list[dict[str, Any]]:
    """CSV with a header: feature columns, `label`, optional `prediction`, `proba_<class>`."""
    if "\x00" in text:
        line = text.count("\n", 0, text.index("\x00")) + 1
        raise InvalidInput([FieldError(None, "file", f"line {line} contains a NUL character")])
    # csv's own limit (131,072 characters) raises an error that names no column: the body limit
    # bounds a field anyway, and the value checks name the row and column of one too long.
    csv.field_size_limit(max(settings.DRIFTWATCH_MAX_REQUEST_BYTES, 131_072))
    reader = csv.DictReader(io.StringIO(text))
    try:
        return _csv_rows(reader, schema)
    except csv.Error as exc:
        raise InvalidInput([FieldError(None, "file", f"line {reader.line_num}: {exc}")]) from None


def _csv_rows(reader: "csv.DictReader[str]", schema: Schema) -> list[dict[str, Any]]:
    header = reader.fieldnames or []
    split = _split_columns(list(header), schema)
    header = [*header, *split]  # a split feature counts as present
    missing = [name for name in schema.feature_types if name not in header]
    if missing or "label" not in header:
        problems = [FieldError(None, name, "missing CSV column") for name in missing]
        if "label" not in header:
            problems.append(FieldError(None, "label", "missing CSV column"))
        raise InvalidInput(problems)
    known = set(schema.feature_types) | {"label", "prediction"} | {f"proba_{c}" for c in schema.classes}
    known |= {column for columns in split.values() for column in columns}
    unknown = [name for name in header if name not in known]
    if unknown:
        raise InvalidInput([FieldError(None, name, "unknown CSV column") for name in unknown])
    errors = Collector()
    rows = [_csv_row(i, line, schema, errors, split) for i, line in enumerate(reader)]
    errors.raise_if_any()
    return rows


def _split_columns(header: list[str], schema: Schema) -> dict[str, list[str]]:
    """Features sent as their type's split columns (an embedding as ``name[0]`` … ``name[D-1]``)
    instead of one column."""
    out = {}
    for name, kind in schema.feature_kinds.items():
        columns = kind.split_columns(name)
        if name not in header and columns and set(columns) <= set(header):
            out[name] = columns
    return out


def _csv_row(
    i: int, line: dict[str, str], schema: Schema, errors: Collector, split: dict[str, list[str]]
) -> dict[str, Any]:
    features: dict[str, Any] = {}
    for name, kind in schema.feature_kinds.items():
        if name in split:
            try:
                features[name] = kind.parse_cells([(line.get(c) or "").strip() for c in split[name]])
            except InvalidValue as exc:
                errors.add(i, f"features.{name}", exc.message)
            continue
        text = (line.get(name) or "").strip()
        if text == "":
            features[name] = None
            continue
        try:
            features[name] = kind.parse_text(text)
        except InvalidValue as exc:
            errors.add(i, f"features.{name}", exc.message)
    row: dict[str, Any] = {"features": features, "label": _csv_target(line.get("label"), schema)}
    if line.get("prediction"):
        row["prediction"] = _csv_target(line["prediction"], schema)
    proba: dict[str, Any] = {}
    for c in map(str, schema.classes):
        text = (line.get(f"proba_{c}") or "").strip()
        if text:
            try:
                proba[c] = float(text)
            except ValueError:
                errors.add(i, f"proba_{c}", f"not a number: {text[:40]!r}")
    if proba:
        row["probabilities"] = proba
    return row


def _csv_target(text: str | None, schema: Schema) -> Any:
    if text is None or text.strip() == "":
        return None
    if schema.is_classification:
        return text.strip()
    try:
        return float(text)  # non-finite values are rejected by clean_target with row and field
    except ValueError:
        return text


def frame_to_parquet(frame: pd.DataFrame) -> bytes:
    buffer = io.BytesIO()
    frame.to_parquet(buffer, index=False)
    return buffer.getvalue()
