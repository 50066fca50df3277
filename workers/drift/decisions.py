"""A check's decisions: its numbers against the policy's thresholds.

Each decision is True (breach), False (fine) or None (not enough data to decide). A broken feed
is not drift: it suppresses the drift decisions instead of being mistaken for them.
"""

import math
from dataclasses import dataclass, replace
from typing import Any, NotRequired, TypedDict

from workers.drift.result import (
    Measures,
    data_quality_read,
    drift_read,
    estimate_read,
    metrics_read,
    score_read,
)

# Metrics where a larger value is worse; every other metric is better when larger.
LOWER_IS_BETTER = frozenset({"mae", "mse", "rmse", "log_loss"})


def higher_is_better(metric: str) -> bool:
    return metric not in LOWER_IS_BETTER


@dataclass(frozen=True)
class Thresholds:
    metric: str  # the realised metric compared with the baseline
    tolerance: float  # how far past the baseline the metric may move before it is a breach
    baseline: float | None  # the policy's fixed baseline, else the reference's own metric
    estimate_baseline: float | None = None  # the reference's own metric, for the label-free estimate

    @property
    def higher_is_better(self) -> bool:
        return higher_is_better(self.metric)


class Decisions(TypedDict):
    baseline: float | None
    metric: str
    value: float | None
    tolerance: float
    accuracy_drop: bool | None
    estimated_accuracy_drop: bool | None
    data_quality: bool | None
    data_drift: bool | None
    multivariate_drift: bool | None
    prediction_drift: bool | None
    usable_for_training: bool
    suppressed: NotRequired[str]
    sequential: NotRequired[dict[str, Any]]  # the sequential detector's update and evidence
    accuracy_drop_by: NotRequired[str]  # set when the detector, not the window rule, found the drop


def breach(value: float | None, thresholds: Thresholds) -> bool | None:
    """Past the baseline by more than the tolerance, in the metric's bad direction."""
    baseline = thresholds.baseline
    if value is None or baseline is None or not math.isfinite(value):
        return None
    if thresholds.higher_is_better:
        return bool(value < baseline - thresholds.tolerance)
    return bool(value > baseline + thresholds.tolerance)


def decisions_make(result: Measures, thresholds: Thresholds, *, enough: bool) -> Decisions:
    """`result`: the check's metrics, estimated, drift, prediction_drift and data_quality (read
    through ``workers.drift.result``, as every stored check is); `enough`: the window has the
    policy's minimum of samples."""
    broken = bool(data_quality_read(result["data_quality"]).broken_feed) if result["data_quality"] else None
    value = metrics_read(result["metrics"]).value(thresholds.metric)
    drift, prediction = drift_read(result["drift"]), score_read(result["prediction_drift"])
    decisions: Decisions = {
        "baseline": thresholds.baseline,
        "metric": thresholds.metric,
        "value": value,
        "tolerance": thresholds.tolerance,
        "accuracy_drop": breach(value, thresholds),
        "estimated_accuracy_drop": None,
        "data_quality": broken if enough or broken else None,
        "data_drift": drift.dataset_drift,
        "multivariate_drift": drift.multivariate.drifted if drift.multivariate else None,
        "prediction_drift": prediction.drifted if prediction else None,
        "usable_for_training": bool(enough and broken is False),
    }
    estimated = estimate_read(result["estimated"]).of(thresholds.metric)
    if estimated is not None and thresholds.estimate_baseline:
        # The policy metric's estimate (CBPE, DLE) against what it reads on the reference itself.
        against = replace(thresholds, baseline=thresholds.estimate_baseline)
        decisions["estimated_accuracy_drop"] = breach(estimated.value, against)
    if broken:
        # A broken feed is not drift: its "drift" says nothing about the world.
        decisions["data_drift"] = decisions["prediction_drift"] = decisions["multivariate_drift"] = None
        decisions["suppressed"] = "drift decisions suppressed: broken feed"
    return decisions
