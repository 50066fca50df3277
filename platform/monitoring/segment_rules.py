"""The rules of a policy's segments: how a feature's values become segment values, and which
``segments`` / ``segment_limit`` a policy may store (no Django models here: the policy model's
clean() uses these rules). The computation is ``monitoring.segments``."""

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from core.errors import FieldError

if TYPE_CHECKING:
    from monitoring.models import MonitoringPolicy

OTHER = "other"
MISSING = "(missing)"
MAX_SEGMENT_FEATURES = 5
MAX_BINS = 50
SEGMENT_LIMIT_RANGE = (1, 50)
SEGMENT_FEATURE_TYPES = ("categorical", "numerical")


@dataclass(frozen=True)
class SegmentSpec:
    feature: str
    bins: tuple[float, ...] | None = None  # numerical: the sorted edges

    def labels(self, values: pd.Series) -> pd.Series:
        """Each row's segment value, as text."""
        if self.bins is None:
            text = values.astype(object).map(lambda v: MISSING if _missing(v) else str(v))
            return text.astype(object)
        numbers = pd.to_numeric(values, errors="coerce").to_numpy(float)
        index = np.searchsorted(np.asarray(self.bins), numbers, side="right")
        names = np.asarray(bin_names(self.bins), dtype=object)
        out = names[np.minimum(index, len(self.bins))]
        out[np.isnan(numbers)] = MISSING
        return pd.Series(out, index=values.index, dtype=object)


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _edge(value: float) -> str:
    return f"{value:g}"


def bin_names(edges: Sequence[float]) -> list[str]:
    """``<e1``, ``[e1, e2)``, …, ``>=ek``."""
    inner = [f"[{_edge(a)}, {_edge(b)})" for a, b in zip(edges, edges[1:], strict=False)]
    return [f"<{_edge(edges[0])}", *inner, f">={_edge(edges[-1])}"]


def segment_key(feature: str, value: str) -> str:
    """How an alert, the API and the page name one segment: ``country=DE``."""
    return f"{feature}={value}"


def policy_segments(policy: "MonitoringPolicy") -> list[SegmentSpec]:
    """The policy's segment features (validated when stored)."""
    out = []
    for entry in policy.segments or []:
        bins = entry.get("bins")
        out.append(SegmentSpec(str(entry["feature"]), tuple(float(b) for b in bins) if bins else None))
    return out


# --- validation (policy.policy_errors) ------------------------------------------------------


def segments_errors(segments: Any, features: dict[str, str]) -> list[FieldError]:
    """What is wrong with a policy's ``segments`` for a model with these features (name → type)."""
    if not isinstance(segments, list):
        return [FieldError(None, "segments", "must be a list of {feature, bins?} objects")]
    if len(segments) > MAX_SEGMENT_FEATURES:
        return [FieldError(None, "segments", f"at most {MAX_SEGMENT_FEATURES} segment features")]
    errors: list[FieldError] = []
    seen: set[str] = set()
    for row, entry in enumerate(segments):
        problem = _entry_problem(entry, features, seen)
        if problem:
            errors.append(FieldError(row, "segments", problem))
    return errors


def _entry_problem(entry: Any, features: dict[str, str], seen: set[str]) -> str | None:
    if not isinstance(entry, dict) or not isinstance(entry.get("feature"), str):
        return 'must be an object with a "feature" name'
    if set(entry) - {"feature", "bins"}:
        return f"unknown keys: {', '.join(sorted(set(entry) - {'feature', 'bins'}))}"
    name, kind = entry["feature"], features.get(entry["feature"])
    if kind is None:
        return f"{name!r} is not a feature of this model"
    if name in seen:
        return f"{name!r} is named twice"
    seen.add(name)
    if kind not in SEGMENT_FEATURE_TYPES:
        return f"{name!r} is {kind}: only categorical and numerical features segment"
    if kind == "categorical":
        return None if "bins" not in entry else f"{name!r} is categorical: it takes no bins"
    return _bins_problem(name, entry.get("bins"))


def _bins_problem(name: str, bins: Any) -> str | None:
    if not isinstance(bins, list) or not bins:
        return f"{name!r} is numerical: give its bin edges (a non-empty list of numbers)"
    if len(bins) > MAX_BINS:
        return f"at most {MAX_BINS} bin edges"
    if not all(isinstance(b, int | float) and not isinstance(b, bool) and math.isfinite(b) for b in bins):
        return "bin edges must be finite numbers"
    if any(b >= a for a, b in zip(bins[1:], bins, strict=False)):
        return "bin edges must be strictly increasing"
    return None


def segment_entries(segments: Any, order: Sequence[str] = ()) -> dict[str, dict[str, Any]]:
    """A stored check's segments by key (``country=DE`` → its entry), the features in ``order``
    first (the policy's; the database keeps no key order), each feature's values as stored."""
    if not isinstance(segments, dict):
        return {}
    features = [f for f in order if f in segments] + sorted(set(segments) - set(order))
    return {
        entry["key"]: entry
        for feature in features
        if isinstance(segments[feature], dict)
        for entry in segments[feature].get("values", [])
        if isinstance(entry, dict) and "key" in entry
    }
