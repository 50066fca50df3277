"""The planner's safety margin, from the estimator's measured error on each kind of layer.

``bench/memory_calibration.py`` runs real training steps of small models of every kind of layer
(convolutions, transposed convolutions, recurrent layers, attention, embeddings, ...) against the
estimate and writes each kind's relative errors (estimate - measured) / measured, per device, to
``error_table.json`` beside this module. A model's margin is the worst margin among the kinds of
layer it contains: that kind's worst under-estimate plus three standard deviations of its errors,
over a floor for what no table sees (allocator fragmentation, ops outside the zoo). A kind of layer
the table has never measured, or a device it has no rows for, gets the old constant, 10%.
"""

from __future__ import annotations

import functools
import json
import statistics
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypedDict

TABLE_PATH = Path(__file__).with_name("error_table.json")
UNMEASURED_MARGIN = 0.10
FLOOR = 0.02
CEILING = 0.5
SPREAD = 3.0  # standard deviations of the kind's errors above its worst under-estimate

# Module class names per kind, most specific first (a TransformerEncoderLayer is "attention",
# not the "linear" and "norm" it contains: its own rows measure the whole block).
KINDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("attention", ("MultiheadAttention", "TransformerEncoderLayer", "TransformerDecoderLayer")),
    ("recurrent", ("LSTM", "GRU", "RNN")),
    ("conv_transpose", ("ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d")),
    ("conv", ("Conv1d", "Conv2d", "Conv3d")),
    ("embedding", ("Embedding", "EmbeddingBag")),
    ("norm", ("BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "LayerNorm", "GroupNorm")),
    ("linear", ("Linear", "Bilinear")),
)
_KIND_OF = {cls: kind for kind, classes in KINDS for cls in classes}


class KindErrors(TypedDict):
    """One kind of layer's measured relative errors on one device (bench/memory_calibration.py)."""

    count: int
    min: float  # the worst under-estimate (negative) or the smallest over-estimate
    max: float
    mean: float
    std: float


def layer_kinds(model: Any) -> set[str]:
    """The kinds of layer a module contains; "other" for parameterised modules of no known kind."""
    kinds: set[str] = set()
    skip: set[int] = set()
    for module in model.modules():
        if id(module) in skip:
            continue
        kind = _KIND_OF.get(type(module).__name__)
        if kind == "attention":
            skip.update(id(m) for m in module.modules())
        if kind:
            kinds.add(kind)
        elif any(True for _ in module.parameters(recurse=False)):
            kinds.add("other")
    return kinds


def summarize(errors: Sequence[float]) -> KindErrors:
    return KindErrors(
        count=len(errors),
        min=min(errors),
        max=max(errors),
        mean=statistics.fmean(errors),
        std=statistics.pstdev(errors) if len(errors) > 1 else abs(errors[0]),
    )


def kind_margin(errors: KindErrors) -> float:
    return max(0.0, -errors["min"]) + SPREAD * errors["std"]


def margin_for_kinds(kinds: Iterable[str], device: str, table: Mapping[str, Any] | None = None) -> float:
    rows = (table if table is not None else load_table()).get("devices", {}).get(device)
    if not rows:
        return UNMEASURED_MARGIN
    worst = FLOOR
    for kind in kinds or ("linear",):
        errors = rows.get(kind)
        worst = max(worst, UNMEASURED_MARGIN if errors is None else FLOOR + kind_margin(errors))
    return min(CEILING, worst)


def error_margin(model: Any, device: str, table: Mapping[str, Any] | None = None) -> float:
    """The planner's margin for ``model`` on ``device`` ("cpu" or "cuda") from the error table."""
    return margin_for_kinds(layer_kinds(model), device, table)


@functools.lru_cache(maxsize=1)
def load_table() -> dict[str, Any]:
    if not TABLE_PATH.exists():
        return {}
    return dict(json.loads(TABLE_PATH.read_text()))
