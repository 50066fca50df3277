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
