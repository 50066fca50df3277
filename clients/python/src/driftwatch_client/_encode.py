"""One sample or label → its JSON bytes, encoded in the caller's thread.

Encoding at log time snapshots the values (the caller may mutate its dicts afterwards) and
gives the queue its byte size; a small sample costs a few microseconds.
"""

from __future__ import annotations

import json
import math
import time
from datetime import date, datetime, timezone
from typing import Any

Timestamp = datetime | float | int | str | None


def _default(value: Any) -> Any:
    """numpy/torch scalars and arrays (.item()/.tolist()), datetimes; anything else is an error."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if hasattr(value, "item"):
        return value.item()
    if isinstance(value, datetime):
        return _timestamp(value)
    if isinstance(value, date):
        return value.isoformat()
    raise TypeError(f"cannot send a {type(value).__name__} value")


_ENCODER = json.JSONEncoder(default=_default, allow_nan=False, separators=(",", ":"), ensure_ascii=False)


def _finite(value: Any) -> Any:
    """NaN and infinities become null (a missing value): JSON has no NaN."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    if hasattr(value, "tolist") or hasattr(value, "item"):
        return _finite(_default(value))
    return value


def dumps(obj: dict[str, Any]) -> bytes:
    try:
        return _ENCODER.encode(obj).encode("utf-8")
    except ValueError:  # a NaN somewhere: the slow path, only then
        return _ENCODER.encode(_finite(obj)).encode("utf-8")


def _timestamp(ts: Timestamp) -> float | int | str:
    """Epoch seconds or ISO 8601; a naive datetime is taken as UTC (the server refuses naive ones)."""
    if ts is None:
        return time.time()
    if isinstance(ts, datetime):
        if ts.tzinfo is None:
            ts = ts.replace(tzinfo=timezone.utc)
        return ts.isoformat()
    if isinstance(ts, bool) or not isinstance(ts, int | float | str):
        raise TypeError(
            f"timestamp must be a datetime, epoch seconds or an ISO string, not {type(ts).__name__}"
        )
    return ts


def sample_id(value: Any) -> str | int:
    if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    if hasattr(value, "item"):  # a numpy integer
        return sample_id(value.item())
    return str(value)


def encode_sample(
    id: Any,
    features: Any,
    prediction: Any,
    probabilities: Any,
    timestamp: Timestamp,
    version: int | None,
) -> bytes:
    """The sample's JSON; `timestamp=None` stamps now, so a sample delayed by an outage keeps its time."""
    body: dict[str, Any] = {
        "id": sample_id(id),
        "timestamp": _timestamp(timestamp),
        "features": features,
        "prediction": prediction,
    }
    if probabilities is not None:
        body["probabilities"] = probabilities
    if version is not None:
        body["version"] = version
    return dumps(body)


def encode_label(id: Any, label: Any, timestamp: Timestamp) -> bytes:
    """The label's JSON; its timestamp says when the truth became known (now by default)."""
    return dumps({"id": sample_id(id), "label": label, "timestamp": _timestamp(timestamp)})
