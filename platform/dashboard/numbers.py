"""Reading numbers out of a check's JSON and writing them as text.

Any JSON part of a check may be ``{}`` (too little data), and old rows may lack a key: these
helpers turn anything that is not a finite number into None, and None into a dash.
"""

import math
from typing import Any


def finite(value: Any) -> float | None:
    """The value as a float when it is a finite number (not a bool), else None."""
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def interval(value: Any) -> tuple[float, float] | None:
    """A stored ``[low, high]`` pair of finite numbers, else None."""
    if isinstance(value, list | tuple) and len(value) == 2:
        lo, hi = finite(value[0]), finite(value[1])
        if lo is not None and hi is not None:
            return (lo, hi)
    return None


def fixed(value: float | None, digits: int = 3) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def interval_text(ci: tuple[float, float] | None) -> str:
    return f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else ""


def scalar_text(value: Any) -> str:
    """An integer as it is, anything else to four decimals."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return fixed(finite(value), 4)
