"""Alert thresholds for a quality metric: learned from the reference's own variability (the
default, NannyML's rule), or an explicit absolute or relative tolerance around the baseline.

The reference band: the reference rows cut into consecutive chunks of one window's size, the
metric computed on each chunk (any metric, through a function of a chunk, so a realised metric
and an estimated one named alike share the band), and the band mean ± k standard deviations of
those values (population sd, as NannyML's StandardDeviationThreshold), clipped to the metric's
range. A window whose metric leaves the band on the bad side is a breach.
"""

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypedDict

import numpy as np
import pandas as pd

REFERENCE_BAND = "reference_band"
ABSOLUTE = "absolute"
RELATIVE = "relative"
RULES = (REFERENCE_BAND, ABSOLUTE, RELATIVE)
DEFAULT_SIGMAS = 3.0
MIN_BAND_CHUNKS = 4  # fewer chunks give no standard deviation worth alerting on

ChunkMetric = Callable[[pd.DataFrame], float | None]

# Metrics where a larger value is worse; every other metric is better when larger.
LOWER_IS_BETTER = frozenset({"mae", "rmse", "mse", "log_loss"})
# Where a metric's values can lie (a band is clipped to it); absent: the [0, 1] of a score.
METRIC_RANGES = {
    "mae": (0.0, math.inf),
    "rmse": (0.0, math.inf),
    "mse": (0.0, math.inf),
    "log_loss": (0.0, math.inf),
    "r2": (-math.inf, 1.0),
}


def higher_is_better(metric: str) -> bool:
    return metric not in LOWER_IS_BETTER


def metric_range(metric: str) -> tuple[float, float]:
    return METRIC_RANGES.get(metric, (0.0, 1.0))


class BandDict(TypedDict):
    """The band as a check stores it (``decisions.band``)."""

    lower: float
    upper: float
    mean: float
    sd: float
    sigmas: float
    chunks: int
    chunk_size: int


@dataclass(frozen=True)
class Band:
    lower: float
    upper: float
    mean: float
    sd: float
    sigmas: float
    chunks: int
    chunk_size: int

    def to_dict(self) -> BandDict:
        return {
            "lower": self.lower,
            "upper": self.upper,
            "mean": self.mean,
            "sd": self.sd,
            "sigmas": self.sigmas,
            "chunks": self.chunks,
            "chunk_size": self.chunk_size,
        }

    def limit(self, metric: str) -> float:
        """The edge on the metric's bad side: a value past it is a breach."""
        return self.lower if higher_is_better(metric) else self.upper


def chunk_values(frame: pd.DataFrame, chunk_size: int, metric_fn: ChunkMetric) -> list[float]:
    """The metric on each whole chunk of ``chunk_size`` consecutive rows (the incomplete tail is
    dropped: its variability is not a window's); undefined values (None, NaN) are left out."""
    if chunk_size < 1:
        return []
    values = []
    for start in range(0, len(frame) - chunk_size + 1, chunk_size):
        value = metric_fn(frame.iloc[start : start + chunk_size])
        if value is not None and math.isfinite(value):
            values.append(float(value))
    return values


def reference_band(
    frame: pd.DataFrame,
    metric: str,
    metric_fn: ChunkMetric,
    *,
    chunk_size: int,
    sigmas: float = DEFAULT_SIGMAS,
) -> Band | None:
    """mean ± sigmas·sd of the metric over the reference's chunks, clipped to the metric's range;
    None when the reference holds fewer than ``MIN_BAND_CHUNKS`` chunks with a value."""
    values = chunk_values(frame, chunk_size, metric_fn)
    if len(values) < MIN_BAND_CHUNKS:
        return None
    mean, sd = float(np.mean(values)), float(np.std(values))
    low, high = metric_range(metric)
    return Band(
        lower=max(mean - sigmas * sd, low),
        upper=min(mean + sigmas * sd, high),
        mean=mean,
        sd=sd,
        sigmas=sigmas,
        chunks=len(values),
        chunk_size=chunk_size,
    )


def tolerance_limit(baseline: float, metric: str, *, rule: str, tolerance: float) -> float:
    """The edge past the baseline: by ``tolerance`` in the metric's units (absolute) or as a
    fraction of the baseline's magnitude (relative), on the metric's bad side."""
    distance = tolerance * abs(baseline) if rule == RELATIVE else tolerance
    return baseline - distance if higher_is_better(metric) else baseline + distance


def past(value: float, limit: float, metric: str) -> bool:
    """Is ``value`` past ``limit`` on the metric's bad side?"""
    return bool(value < limit) if higher_is_better(metric) else bool(value > limit)
