"""Number formatting for the dashboard: missing values render as a dash, never as "None"."""

import json
import math
from typing import Any

from django import template

register = template.Library()


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


@register.filter
def num(value: Any, digits: int = 3) -> str:
    return f"{value:.{int(digits)}f}" if _finite(value) else "—"


@register.filter
def pct(value: Any, digits: int = 1) -> str:
    return f"{100 * value:.{int(digits)}f}%" if _finite(value) else "—"


@register.filter
def duration(seconds: Any) -> str:
    if not _finite(seconds):
        return "—"
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.0f} s"


@register.filter
def pretty_json(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, default=str)


@register.filter
def signed(value: Any, digits: int = 3) -> str:
    return f"{value:+.{int(digits)}f}" if _finite(value) else "—"


@register.filter
def window_label(spec: Any) -> str:
    """A stored window spec in words: "1000samples" → "last 1000 samples", "24h" → "last 24 h"."""
    text = str(spec or "")
    if text.endswith("samples") and text.removesuffix("samples").isdigit():
        return f"last {text.removesuffix('samples')} samples"
    if text.endswith("labelled") and text.removesuffix("labelled").isdigit():
        return f"last {text.removesuffix('labelled')} labelled samples"
    if text.endswith("h") and text[:-1].isdigit():
        return f"last {text[:-1]} h"
    if text.startswith("range:"):
        return "range"
    return text


@register.filter
def metrics_text(metrics: Any) -> str:
    """A version's metrics dict as "accuracy 0.912 · f1_macro 0.884 · n 240", never a Python dict."""
    if not isinstance(metrics, dict) or not metrics:
        return "—"
    parts = [f"{k} {v if isinstance(v, int) else num(v)}" for k, v in metrics.items() if _finite(v)]
    return " · ".join(parts) or "—"


@register.filter
def bytes(value: Any) -> str:  # noqa: A001 - the template's name for it
    """Bytes in binary units ("1.5 GiB"), a dash when missing."""
    if not _finite(value):
        return "—"
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(size) < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return "—"  # unreachable: GiB ends the loop
