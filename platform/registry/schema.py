"""A registered model's schema, and the cleaners that check one value against it.

Shared by the reference upload (registry) and prediction/label ingestion (monitoring), each
collecting every error with its row and field.
"""

import functools
import math
from dataclasses import dataclass, field
from typing import Any

from core.errors import FieldError, InvalidInput
from registry.models import RegisteredModel
from workers.features import MISSING, FeatureKind, InvalidValue, feature_type
from workers.features.categorical import MAX_CATEGORY_CHARS
from workers.features.numerical import is_number

__all__ = ["MAX_CATEGORY_CHARS", "is_number"]  # re-exported: the feature types own them

PROBABILITY_SUM_TOLERANCE = 1e-3


@dataclass(frozen=True)
class Schema:
    task: str
    feature_types: dict[str, str]
    classes: list[Any]
    feature_specs: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> {name, type, options}

    @property
    def is_classification(self) -> bool:
        return self.task == "classification"

    @functools.cached_property
    def feature_kinds(self) -> dict[str, FeatureKind[Any]]:
        """Each feature's registered type (an unknown type raises: never a silent fallback)."""
        specs = self.feature_specs
        return {
            name: feature_type(kind).bind(specs.get(name, {})) for name, kind in self.feature_types.items()
        }

    def class_lookup(self) -> dict[str, Any]:
        """Class labels by their string form: JSON object keys (probabilities) are strings."""
        return {str(c): c for c in self.classes}


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


def clean_features(value: Any, row: int, errors: Collector, schema: Schema) -> dict[str, Any] | None:
    """Missing values are allowed as null where the feature's type (or its ``missing`` option)
    allows them; non-finite numbers count as missing (stored as null)."""
    if not isinstance(value, dict):
        errors.add(row, "features", "required: an object of feature values")
        return None
    types = schema.feature_types
    ok = True
    for name in value.keys() - types.keys():
        errors.add(row, f"features.{name}", "unknown feature (not in the model's schema)")
        ok = False
    kinds = schema.feature_kinds
    # An absent key is refused (a renamed or dropped field is a broken feed), except for a
    # feature registered with "missing": "allow", whose absent value is a missing one.
    for name in types.keys() - value.keys():
        if not (MISSING in kinds[name].options and kinds[name].allows_missing):
            errors.add(row, f"features.{name}", "missing feature (send null for a missing value)")
            ok = False
    if not ok:
        return None
    clean: dict[str, Any] = {}
    for name, kind in kinds.items():
        item = value.get(name)
        if item is None:
            if not kind.allows_missing:
                errors.add(row, f"features.{name}", _refused_missing(kind))
                ok = False
            clean[name] = None
            continue
        try:
            clean[name] = kind.clean(item)
        except InvalidValue as exc:
            errors.add(row, f"features.{name}", exc.message)
            ok = False
    return clean if ok else None


def _refused_missing(kind: FeatureKind[Any]) -> str:
    """The refusal names the option that would accept the value, where the type has it."""
    article = "an" if kind.name[:1] in tuple("aeiou") else "a"
    message = f"required: {article} {kind.name} value (missing values are refused"
    if MISSING in kind.options:
        message += f'; register the feature with "{MISSING}": "allow" to accept them'
    return message + ")"


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
    if not is_number(value):
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
        if not is_number(p) or not (0.0 <= p <= 1.0):
            errors.add(row, f"probabilities.{key}", "must be a number in [0, 1]")
            return False, None
        total += p
    complete = len(value) == len(lookup)
    if total > 1 + PROBABILITY_SUM_TOLERANCE or (complete and total < 1 - PROBABILITY_SUM_TOLERANCE):
        errors.add(row, "probabilities", f"must sum to 1 (got {total:.6g})")
        return False, None
    return True, {str(k): float(p) for k, p in value.items()}


def model_schema(model: RegisteredModel) -> Schema:
    specs = {f["name"]: f for f in model.features}
    return Schema(
        task=model.task, feature_types=model.feature_types, classes=list(model.classes), feature_specs=specs
    )
