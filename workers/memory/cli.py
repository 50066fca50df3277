"""Plumbing for ``manage.py estimate_memory`` kept out of Django so it is testable on its own.

A *factory* is ``"package.module:function"``. The function takes no arguments and returns
``(model, make_batch)`` or ``(model, make_batch, loss_fn)``, where ``make_batch(n)`` builds an
example batch of ``n`` rows (a tensor, tuple or dict of tensors) and ``loss_fn(output, batch)``
gives the scalar loss (omit it when the model returns its own loss).
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "m": 1000**2,
    "mb": 1000**2,
    "g": 1000**3,
    "gb": 1000**3,
    "t": 1000**4,
    "tb": 1000**4,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(text: str) -> int:
    """'16GiB', '512MiB', '8GB', '1.5 GiB' or a plain byte count -> bytes."""
    match = _SIZE.match(text)
    unit = match.group(2).lower() if match else None
    if match is None or unit not in _UNITS:
        raise ValueError(f"not a size: {text!r} (use e.g. 16GiB, 512MiB, 8GB)")
    return int(float(match.group(1)) * _UNITS[unit])


def format_bytes(n: int) -> str:
    for unit, size in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if abs(n) >= size:
            return f"{n / size:,.2f} {unit}"
    return f"{n} B"


@dataclass(frozen=True)
class Factory:
    model: Any
    make_batch: Callable[[int], Any]
    loss_fn: Callable[[Any, Any], Any] | None


def load_factory(spec: str) -> Factory:
    """Import ``module:function`` and call it (see the module docstring for the contract)."""
    module_name, sep, func_name = spec.partition(":")
    if not sep or not module_name or not func_name:
        raise ValueError(f"factory must look like 'package.module:function', got {spec!r}")
    func = getattr(importlib.import_module(module_name), func_name)
    result = func()
    if not isinstance(result, tuple) or len(result) not in (2, 3):
        raise ValueError("the factory must return (model, make_batch) or (model, make_batch, loss_fn)")
    if not callable(result[1]):
        raise ValueError("the factory's second item must be make_batch(batch_size)")
    return Factory(result[0], result[1], result[2] if len(result) == 3 else None)


def breakdown_table(estimate: Any, budget_bytes: int | None = None) -> str:
    """The estimate as an aligned text table: one row per category, then the totals."""
    rows = [(name, value) for name, value in estimate.breakdown.items() if value]
    peak = estimate.peak_allocated_bytes or 1
    lines = [f"{'component':<22}{'bytes':>16}{'':>4}{'share':>8}", "-" * 50]
    for name, value in rows:
        share = f"{100 * value / peak:6.1f}%" if name not in ("allocator_cache", "cuda_context") else ""
        lines.append(f"{name:<22}{format_bytes(value):>16}{'':>4}{share:>8}")
    lines.append("-" * 50)
    lines.append(f"{'peak allocated':<22}{format_bytes(estimate.peak_allocated_bytes):>16}")
    lines.append(f"{'peak reserved':<22}{format_bytes(estimate.peak_reserved_bytes):>16}")
    if estimate.device == "cuda":
        lines.append(f"{'device total':<22}{format_bytes(estimate.device_total_bytes):>16}")
    if budget_bytes is not None:
        needed = estimate.device_total_bytes if estimate.device == "cuda" else estimate.peak_allocated_bytes
        verdict = "fits" if needed <= budget_bytes else "does NOT fit"
        lines.append(f"{'budget':<22}{format_bytes(budget_bytes):>16}    {verdict}")
    return "\n".join(lines)


def plan_summary(plan: Any) -> str:
    head = (
        f"plan: batch {plan.batch_size}, {plan.precision}, accumulation {plan.accumulation_steps}, "
        f"checkpointing {'on' if plan.checkpointing else 'off'}: {format_bytes(plan.estimated_bytes)} "
        f"of {format_bytes(plan.usable_bytes)} usable ({format_bytes(plan.budget_bytes)} budget, "
        f"{100 * plan.margin:.0f}% margin){'' if plan.fits else ' - NOTHING FITS'}"
    )
    alts = [
        f"  alternative: batch {o.batch_size}, {o.precision}, accumulation {o.accumulation_steps}, "
        f"checkpointing {'on' if o.checkpointing else 'off'}, {format_bytes(o.estimated_bytes)}"
        f"{'' if o.fits else ' (does not fit)'}"
        for o in plan.alternatives
    ]
    return "\n".join([head, *alts])
