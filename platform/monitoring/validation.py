"""Validates ingested rows against a model's schema, collecting every error with row and field.

Written as plain loops over dicts on purpose: a 10,000-sample batch is validated in tens of
milliseconds, where a DRF serializer per row costs seconds.
"""

import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from core.errors import FieldError, InvalidInput

MAX_ID_LENGTH = 200
# Clocks drift; a timestamp further ahead than this is a client bug, not a prediction.
MAX_FUTURE_SKEW = timedelta(days=1)
PROBABILITY_SUM_TOLERANCE = 1e-3
# pandas holds 1677..2262 only, and one ancient sample would break every check over its window.
MIN_TIMESTAMP = datetime(1970, 1, 1, tzinfo=UTC)
# PostgreSQL stores offsets up to ±15:59 (real zones span -12:00..+14:00).
MAX_UTC_OFFSET = timedelta(hours=15, minutes=59)
# Category values are labels, not documents: longer ones are refused (and would bloat every window).
MAX_CATEGORY_CHARS = 1000


def offset_problem(ts: datetime) -> str | None:
    offset = ts.utcoffset()
    if offset is None:
        return "must include a timezone offset (e.g. 2026-01-31T12:00:00Z)"
    if abs(offset) > MAX_UTC_OFFSET:
        return "timezone offset must be within ±15:59"
    return None


def timestamp_problem(ts: datetime, now: datetime) -> str | None:
    """Why an ingested timestamp is refused, or None: a real offset, 1970 ≤ ts ≤ now + 1 day."""
    problem = offset_problem(ts)
    if problem:
        return problem
    if ts < MIN_TIMESTAMP:
        return "is before 1970-01-01"
    if ts > now + MAX_FUTURE_SKEW:
        return "is more than a day in the future"
    return None


@dataclass(frozen=True)
class Schema:
    task: str
    feature_types: dict[str, str]
    classes: list[Any]

    @property
    def is_classification(self) -> bool:
        return self.task == "classification"

    def class_lookup(self) -> dict[str, Any]:
        """Class labels by their string form: JSON object keys (probabilities) are strings."""
        return {str(c): c for c in self.classes}


@dataclass
class CleanSample:
    sample_id: str
    timestamp: datetime
    features: dict[str, Any]
    prediction: Any
    probabilities: dict[str, float] | None
    version: int | None


class Collector:
    """Collects errors; stops collecting (not validating) after a cap to bound the response."""

    def __init__(self, cap: int = 1000) -> None:
        self.errors: list[FieldError] = []
        self.cap = cap

    def add(self, row: int | None, field: str, message: str) -> None:
        if len(self.errors) < self.cap:
            self.errors.append(FieldError(row, field, message))

    def raise_if_any(self) -> None:
        if self.errors:
            raise InvalidInput(self.errors)

    def check_object(self, raw: Any, row: int, *, allowed: frozenset[str], what: str, shape: str) -> bool:
        """A row must be a JSON object with only the allowed keys; unknown keys are named."""
        if not isinstance(raw, dict):
            self.add(row, what, f"must be an object {shape}")
            return False
        for extra in raw.keys() - allowed:
            self.add(row, extra, "unknown field")
        return True


def require_list(body: Any, key: str, *, max_rows: int) -> list[Any]:
    if not isinstance(body, dict):
        raise InvalidInput([FieldError(None, "body", "must be a JSON object")])
    rows = body.get(key)
    if not isinstance(rows, list):
        raise InvalidInput([FieldError(None, key, "required: a list")])
    if not rows:
        raise InvalidInput([FieldError(None, key, "must not be empty")])
    if len(rows) > max_rows:
        raise InvalidInput([FieldError(None, key, f"at most {max_rows} rows per request, got {len(rows)}")])
    return rows


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def clean_id(value: Any, row: int, errors: Collector, field: str = "id") -> str | None:
    if isinstance(value, bool) or not isinstance(value, str | int):
        errors.add(row, field, "required: a non-empty string or integer")
        return None
    text = str(value)
    if not text or len(text) > MAX_ID_LENGTH:
        errors.add(row, field, f"must have 1 to {MAX_ID_LENGTH} characters")
        return None
    return text


def clean_timestamp(value: Any, row: int, errors: Collector, now: datetime) -> datetime | None:
    if value is None:
        return now
    if _is_number(value):
        if not math.isfinite(value):
            errors.add(row, "timestamp", "must be finite")
            return None
        try:
            ts = datetime.fromtimestamp(value, tz=UTC)
        except (OverflowError, OSError, ValueError):
            errors.add(row, "timestamp", "epoch seconds out of range")
            return None
    elif isinstance(value, str):
        try:
            ts = datetime.fromisoformat(value)
        except ValueError:
            errors.add(row, "timestamp", f"not an ISO 8601 datetime: {value[:40]!r}")
            return None
    else:
        errors.add(row, "timestamp", "must be an ISO 8601 string or epoch seconds")
        return None
    problem = timestamp_problem(ts, now)
    if problem:
        errors.add(row, "timestamp", problem)
        return None
    return ts.astimezone(UTC)


def clean_features(value: Any, row: int, errors: Collector, schema: Schema) -> dict[str, Any] | None:
    """Missing values are allowed as null; non-finite numbers count as missing (stored as null)."""
    if not isinstance(value, dict):
        errors.add(row, "features", "required: an object of feature values")
        return None
    types = schema.feature_types
    ok = True
    for name in value.keys() - types.keys():
        errors.add(row, f"features.{name}", "unknown feature (not in the model's schema)")
        ok = False
    for name in types.keys() - value.keys():
        errors.add(row, f"features.{name}", "missing feature (send null for a missing value)")
        ok = False
    if not ok:
        return None
    clean: dict[str, Any] = {}
    for name, kind in types.items():
        item = value[name]
        if item is None:
            clean[name] = None
        elif kind == "numerical":
            if not _is_number(item):
                errors.add(row, f"features.{name}", f"numerical feature got {type(item).__name__}")
                ok = False
                continue
            clean[name] = item if math.isfinite(item) else None
        elif isinstance(item, str):
            if len(item) > MAX_CATEGORY_CHARS:
                errors.add(row, f"features.{name}", f"at most {MAX_CATEGORY_CHARS} characters")
                ok = False
                continue
            clean[name] = item
        elif isinstance(item, int) and not isinstance(item, bool):
            clean[name] = str(item)
        elif isinstance(item, bool):
            clean[name] = "true" if item else "false"
        else:
            errors.add(row, f"features.{name}", f"categorical feature got {type(item).__name__}")
            ok = False
    return clean if ok else None


def clean_target(
    value: Any, row: int, errors: Collector, schema: Schema, field: str, lookup: dict[str, Any]
) -> tuple[bool, Any]:
    """A prediction or a label: a known class, or a finite number for regression."""
    if schema.is_classification:
        if (
            value is None
            or isinstance(value, dict | list)
            or (isinstance(value, float) and math.isnan(value))
        ):
            errors.add(row, field, "required: one of the model's classes")
            return False, None
        key = str(value).lower() if isinstance(value, bool) else str(value)
        if key not in lookup:
            shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
            errors.add(row, field, f"unknown class {shown} (classes: {list(lookup.values())})")
            return False, None
        return True, lookup[key]
    if not _is_number(value):
        errors.add(row, field, "required: a number")
        return False, None
    if not math.isfinite(value):
        errors.add(row, field, "must be finite (NaN and infinity are rejected)")
        return False, None
    return True, value


def clean_probabilities(
    value: Any, row: int, errors: Collector, lookup: dict[str, Any]
) -> tuple[bool, dict[str, float] | None]:
    if value is None:
        return True, None
    if not isinstance(value, dict) or not value:
        errors.add(row, "probabilities", "must be an object {class: probability}")
        return False, None
    total = 0.0
    for key, p in value.items():
        if key not in lookup:
            errors.add(row, f"probabilities.{key}", "unknown class")
            return False, None
        if not _is_number(p) or not (0.0 <= p <= 1.0):
            errors.add(row, f"probabilities.{key}", "must be a number in [0, 1]")
            return False, None
        total += p
    complete = len(value) == len(lookup)
    if total > 1 + PROBABILITY_SUM_TOLERANCE or (complete and total < 1 - PROBABILITY_SUM_TOLERANCE):
        errors.add(row, "probabilities", f"must sum to 1 (got {total:.6g})")
        return False, None
    return True, {str(k): float(p) for k, p in value.items()}


def clean_samples(rows: list[Any], schema: Schema, *, versions: set[int], now: datetime) -> list[CleanSample]:
    """Validate a predictions batch. Raises InvalidInput listing every bad (row, field)."""
    errors = Collector()
    lookup = schema.class_lookup()
    out: list[CleanSample] = []
    for i, raw in enumerate(rows):
        if not errors.check_object(
            raw, i, allowed=SAMPLE_KEYS, what="sample", shape="{id, features, prediction, ...}"
        ):
            continue
        sample_id = clean_id(raw.get("id"), i, errors)
        ts = clean_timestamp(raw.get("timestamp"), i, errors, now)
        features = clean_features(raw.get("features"), i, errors, schema)
        ok_pred, prediction = clean_target(raw.get("prediction"), i, errors, schema, "prediction", lookup)
        ok_proba, proba = (True, None)
        if "probabilities" in raw:
            if schema.is_classification:
                ok_proba, proba = clean_probabilities(raw["probabilities"], i, errors, lookup)
            elif raw["probabilities"] is not None:
                errors.add(i, "probabilities", "only for classification models")
                ok_proba = False
        version = raw.get("version")
        if version is not None and (not isinstance(version, int) or version not in versions):
            errors.add(i, "version", f"unknown version {version!r} of this model")
            continue
        if sample_id is None or ts is None or features is None or not ok_pred or not ok_proba:
            continue
        out.append(CleanSample(sample_id, ts, features, prediction, proba, version))
    errors.raise_if_any()
    return out


SAMPLE_KEYS = frozenset({"id", "timestamp", "features", "prediction", "probabilities", "version"})
LABEL_KEYS = frozenset({"id", "label", "timestamp"})


@dataclass(frozen=True)
class CleanLabel:
    label: Any
    labelled_at: datetime | None  # when the truth became known, if the client says so


def clean_labels(rows: list[Any], schema: Schema, *, now: datetime) -> dict[str, CleanLabel]:
    """Validate a labels batch → {sample id: label}; a repeated id keeps its last label.

    An optional `timestamp` says when the truth became known (a backfill replays history), so
    label delay is measured from it rather than from the arrival wall clock.
    """
    errors = Collector()
    lookup = schema.class_lookup()
    out: dict[str, CleanLabel] = {}
    for i, raw in enumerate(rows):
        if not errors.check_object(raw, i, allowed=LABEL_KEYS, what="label", shape="{id, label, timestamp?}"):
            continue
        sample_id = clean_id(raw.get("id"), i, errors)
        ok, label = clean_target(raw.get("label"), i, errors, schema, "label", lookup)
        has_time = raw.get("timestamp") is not None
        labelled_at = clean_timestamp(raw.get("timestamp"), i, errors, now) if has_time else None
        if sample_id is not None and ok and (labelled_at is not None or not has_time):
            out[sample_id] = CleanLabel(label, labelled_at)
    errors.raise_if_any()
    return out
