"""Segments: the same check, once per value of a segment feature.

A policy names segment features (``segments``: ``[{"feature": "country"}, {"feature": "age",
"bins": [30, 50]}]``) and how many values each keeps (``segment_limit``). A categorical
feature's values are its categories; a numerical one's are the bins its edges cut
(``<30``, ``[30, 50)``, ``>=50``); a missing value is ``(missing)``. The top ``segment_limit``
values by volume in the reference (in the window when the model has no reference) are segments
of their own, every other value is ``other``. Each segment's rows run through the unchanged
per-window computation (``checks.check_compute``) against the same segment of the reference,
so quality, the estimate, drift and the decisions mean what they mean for the whole model. A
segment with fewer rows than the policy's ``min_samples`` says so and decides nothing.
"""

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pandas as pd

from monitoring.reference import ReferenceState, reference_frame, reference_state_of_rows
from monitoring.segment_rules import OTHER, SegmentSpec, policy_segments, segment_key
from monitoring.window import Window
from registry.models import RegisteredModel
from workers.drift.result import DECISION_KINDS

if TYPE_CHECKING:
    from monitoring.models import MonitoringPolicy

# What a segment keeps of a check's result (no distributions: the drill-down is the whole model's).
KEPT = (
    "n_samples",
    "n_labelled",
    "metrics",
    "estimated",
    "drift",
    "prediction_drift",
    "data_quality",
    "decisions",
)

Compute = Callable[..., Any]  # checks.check_compute (passed in: checks imports this module)


# --- computation -------------------------------------------------------------------------------


def _top_values(labels: pd.Series, limit: int) -> list[str]:
    """The ``limit`` most frequent values (ties by name, so the set is stable)."""
    counts = labels.value_counts()
    ranked = sorted(counts.items(), key=lambda item: (-int(item[1]), str(item[0])))
    return [str(v) for v, _ in ranked[:limit] if v != OTHER]


@functools.lru_cache(maxsize=32)
def _reference_segments(
    model_id: int, reference_id: int, summary_name: str, spec: SegmentSpec, limit: int
) -> tuple[list[str], dict[str, ReferenceState]]:
    """The segment values (top by reference volume) and each one's reference state, fitted once
    per reference and process (a re-activated reference has another id; ``summary_name``, its
    summary file's unique name, keys the cache too, as the reference's own cache is keyed: an id
    used again, as a test database's rolled-back rows reuse them, is another reference)."""
    frame = reference_frame(reference_id=reference_id)
    if frame is None or spec.feature not in frame.columns:
        return [], {}
    model = RegisteredModel.objects.get(pk=model_id)
    labels = spec.labels(frame[spec.feature])
    top = _top_values(labels, limit)
    grouped = labels.where(labels.isin(top), OTHER)
    states = {
        value: reference_state_of_rows(
            model=model, reference_id=reference_id, frame=frame[(grouped == value).to_numpy()]
        )
        for value in [*top, OTHER]
        if (grouped == value).any()
    }
    return top, states


def _undecided(decisions: dict[str, Any], reason: str) -> None:
    for kind in DECISION_KINDS:
        decisions[kind] = None
    decisions["usable_for_training"] = False
    decisions["undecided"] = reason


def _segment_entry(
    *,
    compute: Compute,
    model: RegisteredModel,
    policy: "MonitoringPolicy",
    window: Window,
    reference: ReferenceState | None,
    key: str,
) -> dict[str, Any]:
    entry: dict[str, Any]
    if window.frame.empty:
        entry = {k: {} for k in KEPT} | {"n_samples": 0, "n_labelled": 0}
    else:
        result = compute(model=model, policy=policy, window=window, reference=reference)
        entry = {k: result[k] for k in KEPT}
    entry["decisions"] = dict(entry["decisions"])
    if entry["n_samples"] < policy.min_samples:
        # Too few rows to tell a change from noise: say so rather than decide.
        _undecided(
            entry["decisions"],
            f"too small for a decision: {entry['n_samples']} samples, the policy needs {policy.min_samples}",
        )
    return {"key": key, **entry}


def segments_compute(
    *,
    compute: Compute,
    model: RegisteredModel,
    policy: "MonitoringPolicy",
    window: Window,
    reference: ReferenceState | None,
) -> dict[str, Any]:
    """``{feature: {"bins": edges | None, "values": [{"value", "key", n_samples, metrics, …,
    decisions}, …]}}`` in volume order, ``other`` last; {} when the policy names no segment."""
    out: dict[str, Any] = {}
    for spec in policy_segments(policy):
        if not window.has(spec.feature):
            continue
        labels = spec.labels(window.feature(spec.feature))
        top, states = (
            _reference_segments(
                model.pk, reference.reference_id, reference.summary_name, spec, policy.segment_limit
            )
            if reference is not None
            else ([], {})
        )
        if reference is None or not states:
            top = _top_values(labels, policy.segment_limit)
        grouped = labels.where(labels.isin(top), OTHER).to_numpy()
        values = [*top, OTHER] if (grouped == OTHER).any() or OTHER in states else top
        out[spec.feature] = {
            "bins": list(spec.bins) if spec.bins else None,
            "values": [
                {
                    "value": value,
                    **_segment_entry(
                        compute=compute,
                        model=model,
                        policy=policy,
                        window=window.rows(grouped == value),
                        reference=states.get(value) if reference is not None else None,
                        key=segment_key(spec.feature, value),
                    ),
                }
                for value in values
            ],
        }
    return out


def segments_realised_refresh(
    *,
    segments: Any,
    frame: pd.DataFrame,
    realise: Callable[..., Any],
    pair: Compute,
) -> dict[str, Any]:
    """The stored segments with their realised side recomputed on a reloaded window (late
    labels), each row in the segment it was in; drift, estimates and decisions stay as decided."""
    if not isinstance(segments, dict):
        return {}
    out = {}
    for feature, stored in segments.items():
        if feature not in frame.columns or not isinstance(stored, dict):
            out[feature] = stored
            continue
        spec = SegmentSpec(feature, tuple(stored["bins"]) if stored.get("bins") else None)
        labels = spec.labels(frame[feature])
        named = [e["value"] for e in stored.get("values", []) if e["value"] != OTHER]
        grouped = labels.where(labels.isin(named), OTHER).to_numpy()
        values = []
        for entry in stored.get("values", []):
            realised = realise(frame[grouped == entry["value"]])
            estimated = dict(entry.get("estimated") or {})
            pair(estimated, realised["metrics"])
            values.append(
                {
                    **entry,
                    "n_labelled": realised["n_labelled"],
                    "metrics": realised["metrics"],
                    "estimated": estimated,
                }
            )
        out[feature] = {**stored, "values": values}
    return out
