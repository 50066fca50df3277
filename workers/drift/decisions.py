"""A check's decisions: its numbers against the policy's thresholds.

Each decision is True (breach), False (fine) or None (not enough data to decide). A broken feed
is not drift: it suppresses the drift decisions instead of being mistaken for them.
"""

import math
from dataclasses import dataclass
from typing import Any, NotRequired, TypedDict

from workers.drift.result import (
    Measures,
    data_quality_read,
    drift_read,
    estimate_read,
    metrics_read,
    score_read,
)
from workers.drift.thresholds import (
    ABSOLUTE,
    REFERENCE_BAND,
    RELATIVE,
    Band,
    BandDict,
    higher_is_better,
    past,
    tolerance_limit,
)

__all__ = ["Decisions", "Thresholds", "breach", "decisions_make", "higher_is_better", "realised_decide"]


@dataclass(frozen=True)
class Thresholds:
    """When a metric is a breach. ``rule``: the reference band (mean ± k sd of the metric over
    reference chunks of one window's size; without a band, too small a reference, the absolute
    tolerance decides and ``fallback`` says why), an absolute tolerance around the baseline, or
    a relative one (a fraction of the baseline)."""

    metric: str  # the realised metric compared with the baseline
    tolerance: float  # how far past the baseline the metric may move before it is a breach
    baseline: float | None  # the policy's fixed baseline, else the reference's own metric
    estimate_baseline: float | None = None  # the reference's own metric, for the label-free estimate
    rule: str = ABSOLUTE
    relative_tolerance: float = 0.0
    band: Band | None = None
    fallback: str | None = None  # why the band rule fell back to the absolute tolerance

    @property
    def higher_is_better(self) -> bool:
        return higher_is_better(self.metric)

    @property
    def applied_rule(self) -> str:
        """The rule that decides: the band's falls back to the absolute tolerance without a band."""
        if self.rule == REFERENCE_BAND and self.band is None:
            return ABSOLUTE
        return self.rule

    def limit(self, baseline: float | None) -> float | None:
        """The threshold on the metric's bad side: past it is a breach (None: undecidable)."""
        if self.applied_rule == REFERENCE_BAND and self.band is not None:
            return self.band.limit(self.metric)
        if baseline is None:
            return None
        tolerance = self.relative_tolerance if self.applied_rule == RELATIVE else self.tolerance
        return tolerance_limit(baseline, self.metric, rule=self.applied_rule, tolerance=tolerance)

    def rule_text(self) -> str:
        """Which rule decides, in words (the API's ``decisions.rule_text``, alerts, the page)."""
        band = self.band
        if self.applied_rule == REFERENCE_BAND and band is not None:
            return (
                f"reference band [{band.lower:.4f}, {band.upper:.4f}]: mean ± {band.sigmas:g} sd of "
                f"{self.metric} over {band.chunks} reference windows of {band.chunk_size} rows"
            )
        if self.applied_rule == RELATIVE:
            return f"relative tolerance {self.relative_tolerance:.2%} of the baseline"
        text = f"absolute tolerance {self.tolerance:g}"
        return f"{text} ({self.fallback})" if self.fallback else text


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
    rule: NotRequired[str]  # the threshold rule that decided: reference_band, absolute, relative
    rule_text: NotRequired[str]  # the same in words, with the band or the tolerance
    threshold: NotRequired[float | None]  # the realised metric's edge: past it is a breach
    estimate_threshold: NotRequired[float | None]  # the label-free estimate's edge
    band: NotRequired[BandDict]  # the reference band, when that rule decided


def breach(value: float | None, thresholds: Thresholds, baseline: float | None = None) -> bool | None:
    """Past the threshold (the band's edge, or the baseline plus the tolerance) on the metric's
    bad side; ``baseline``: the one the tolerance counts from (default the thresholds')."""
    limit = thresholds.limit(thresholds.baseline if baseline is None else baseline)
    if value is None or limit is None or not math.isfinite(value):
        return None
    return past(value, limit, thresholds.metric)


def _centre(thresholds: Thresholds) -> tuple[float | None, float]:
    """What the chart and the severity read as the baseline and the tolerance: under the band,
    its mean and its distance to the bad edge; else the baseline and the tolerance in units."""
    band = thresholds.band
    if thresholds.applied_rule == REFERENCE_BAND and band is not None:
        return band.mean, abs(band.mean - band.limit(thresholds.metric))
    baseline, limit = thresholds.baseline, thresholds.limit(thresholds.baseline)
    if baseline is None or limit is None:
        return baseline, thresholds.tolerance
    return baseline, abs(baseline - limit)


def realised_decide(decisions: Decisions, metrics: Any, thresholds: Thresholds) -> Decisions:
    """The realised side of the decisions: the metric's value, the rule and its verdict. A check
    calls it once; a refresh with late labels calls it again on the stored decisions (a drop the
    sequential detector found stays a drop)."""
    value = metrics_read(metrics).value(thresholds.metric)
    baseline, tolerance = _centre(thresholds)
    decisions["baseline"], decisions["tolerance"] = baseline, tolerance
    decisions["metric"], decisions["value"] = thresholds.metric, value
    decisions["rule"], decisions["rule_text"] = thresholds.applied_rule, thresholds.rule_text()
    decisions["threshold"] = thresholds.limit(thresholds.baseline)
    if thresholds.applied_rule == REFERENCE_BAND and thresholds.band is not None:
        decisions["band"] = thresholds.band.to_dict()
    else:
        decisions.pop("band", None)
    if decisions.get("accuracy_drop_by") != "sequential detector":
        decisions["accuracy_drop"] = breach(value, thresholds)
    return decisions


def decisions_make(result: Measures, thresholds: Thresholds, *, enough: bool) -> Decisions:
    """`result`: the check's metrics, estimated, drift, prediction_drift and data_quality (read
    through ``workers.drift.result``, as every stored check is); `enough`: the window has the
    policy's minimum of samples."""
    broken = bool(data_quality_read(result["data_quality"]).broken_feed) if result["data_quality"] else None
    drift, prediction = drift_read(result["drift"]), score_read(result["prediction_drift"])
    decisions: Decisions = {
        "baseline": thresholds.baseline,
        "metric": thresholds.metric,
        "value": None,
        "tolerance": thresholds.tolerance,
        "accuracy_drop": None,
        "estimated_accuracy_drop": None,
        "data_quality": broken if enough or broken else None,
        "data_drift": drift.dataset_drift,
        "multivariate_drift": drift.multivariate.drifted if drift.multivariate else None,
        "prediction_drift": prediction.drifted if prediction else None,
        "usable_for_training": bool(enough and broken is False),
    }
    realised_decide(decisions, result["metrics"], thresholds)
    estimated = estimate_read(result["estimated"]).of(thresholds.metric)
    if estimated is not None and (thresholds.estimate_baseline or thresholds.band):
        # The policy metric's estimate (CBPE, DLE) against the same band as the realised metric
        # (NannyML's rule), or the tolerance around what it reads on the reference itself.
        against = thresholds.estimate_baseline
        decisions["estimate_threshold"] = thresholds.limit(against)
        decisions["estimated_accuracy_drop"] = breach(estimated.value, thresholds, against)
    if broken:
        # A broken feed is not drift: its "drift" says nothing about the world.
        decisions["data_drift"] = decisions["prediction_drift"] = decisions["multivariate_drift"] = None
        decisions["suppressed"] = "drift decisions suppressed: broken feed"
    return decisions
