"""A check's result, typed from the engine to storage and back (issue 20 §2.2).

Writing: the engine's parts build ``CheckResultDict`` (TypedDicts: ``Metrics``, ``LabelStats``,
``EstimatedDict``, ``DriftDict``, ``ColumnDriftDict``, ``DataQualityDict``, ``Decisions``), and
the check stores each part as is in one of QualityCheck's eight JSON columns (``{}`` for a part
not computed). Reading: only through the ``*_read`` functions here, which turn a stored column
into a frozen dataclass. A key may be absent (a check not computed, skipped or failed, or one
stored before the key existed); each dataclass field's default is that key's one documented
default, so no reader restates one (the defaults once disagreed: a window lacking
``usable_for_training`` blocked retraining but fed its rows to training).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict

from workers.drift.distribution import DistributionDict
from workers.drift.engine import ColumnDriftDict, DriftDict
from workers.drift.quality import LabelStats, Metrics
from workers.drift.stats import SampleDict

if TYPE_CHECKING:  # decisions.py reads its inputs through this module
    from workers.drift.decisions import Decisions

# --- written: what the engine produces ------------------------------------------------------------


class MetricEstimateDict(TypedDict, total=False):
    """One metric's label-free estimate (``QualityCheck.estimated["metrics"][name]``)."""

    value: float
    ci: list[float]
    realised: float  # the realised metric beside it, once labels came
    error: float  # value - realised
    sample: SampleDict  # made from a sample of the window's rows (DLE past SAMPLE_ABOVE)


class EstimatedDict(TypedDict, total=False):
    """The label-free estimate (``QualityCheck.estimated``): CBPE or DLE; ``{}`` when the window
    was too small or a regressor has no loss estimator. The top-level keys are the policy's
    metric's estimate (as stored before every metric was estimated); ``metrics`` holds every
    metric the method estimates, by the realised metrics' names (CBPE: accuracy, roc_auc,
    precision, recall, f1 (binary), precision_macro, recall_macro, f1_macro; DLE: mae, mse, rmse)."""

    metric: str
    value: float | None
    ci: list[float]
    method: str
    available: bool  # False with a reason: the estimate could not be made
    reason: str
    realised: float  # the realised metric beside it, once labels came
    error: float  # value - realised
    metrics: dict[str, MetricEstimateDict]
    sample: SampleDict  # the policy's metric made from a sample of the window's rows


class ColumnQualityDict(TypedDict):
    missing_count: int
    missing_share: float | None
    out_of_schema_count: NotRequired[int]  # categorical features with known categories
    out_of_schema_share: NotRequired[float | None]
    out_of_schema_examples: NotRequired[list[Any]]


class DataQualityDict(TypedDict):
    """A window's data quality (``QualityCheck.data_quality``)."""

    n_rows: int
    columns: dict[str, ColumnQualityDict]
    broken_feed: bool
    reasons: list[str]
    thresholds: dict[str, float]


class VersionMetricsDict(TypedDict):
    """One version's realised metrics in a window (``QualityCheck.per_version[<"v3">]``)."""

    n: int | None
    accuracy: float | None
    f1_macro: float | None
    mae: float | None
    rmse: float | None
    r2: float | None


class Measures(TypedDict):
    """What a check measured, from which its decisions are made (``{}``: not computed)."""

    metrics: Metrics | dict[str, Any]  # {} below the policy's min_labels
    estimated: EstimatedDict
    drift: DriftDict | dict[str, Any]  # {} below min_samples or without a reference
    prediction_drift: ColumnDriftDict | dict[str, Any]
    data_quality: DataQualityDict | dict[str, Any]


class RealisedDict(TypedDict):
    """What the labels say (recomputed when late labels arrive)."""

    n_labelled: int
    labels: LabelStats
    metrics: Metrics | dict[str, Any]
    per_version: dict[str, VersionMetricsDict]


class CheckResultDict(Measures):
    """Everything a check computes over one window (the JSON columns, ``{}`` when not computed)."""

    n_samples: int
    n_labelled: int
    labels: LabelStats
    per_version: dict[str, VersionMetricsDict]
    decisions: Decisions
    distributions: NotRequired[dict[str, DistributionDict]]  # stored apart (CheckDistribution)


# --- read: stored JSON back into typed values -----------------------------------------------------

# The decisions that are verdicts (True breach, False fine, None undecided); alert kinds name them.
DECISION_KINDS = (
    "accuracy_drop",
    "estimated_accuracy_drop",
    "data_quality",
    "data_drift",
    "multivariate_drift",
    "prediction_drift",
)


def _json(raw: object) -> Mapping[str, Any]:
    """A stored column as a mapping: None or anything else than an object reads as empty."""
    return raw if isinstance(raw, Mapping) else {}


_FIELD_NAMES: dict[type[Any], tuple[str, ...]] = {}


def _field_names(cls: type[Any]) -> tuple[str, ...]:
    """``cls``'s field names, listed once: a stored column is read thousands of times a page."""
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = tuple(f.name for f in fields(cls))
    return names


def _present(cls: type[Any], raw: Mapping[str, Any]) -> dict[str, Any]:
    """The stored keys that are fields of ``cls``; an absent or null key takes the field default."""
    return {name: raw[name] for name in _field_names(cls) if raw.get(name) is not None}


def number(value: object) -> float | None:
    """A stored number as a finite float; anything else (None, NaN, a string, a bool) is None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def pair(value: object) -> tuple[float | None, float | None] | None:
    """A stored interval ``[low, high]``; None when absent or not a pair."""
    if not isinstance(value, list | tuple) or len(value) != 2:
        return None
    return number(value[0]), number(value[1])


@dataclass(frozen=True)
class StoredDecisions:
    """``QualityCheck.decisions``. Defaults: every verdict None (undecided); ``usable_for_training``
    False: a window's rows train a model only when its check said so (the engine's rule: enough
    samples and a feed known not to be broken), so a check that never decided is not usable, for
    the retrain trigger and the training data alike."""

    metric: str | None = None
    value: float | None = None
    baseline: float | None = None
    tolerance: float | None = None
    usable_for_training: bool = False
    suppressed: str | None = None  # why drift verdicts were withheld (a broken feed)
    accuracy_drop_by: str | None = None  # "sequential detector" when it, not the window, found it
    rule: str | None = None  # the threshold rule that decided (None: stored before rules existed)
    rule_text: str | None = None  # the rule in words, with its band or tolerance
    threshold: float | None = None  # the realised metric's edge on its bad side
    estimate_threshold: float | None = None  # the label-free estimate's edge
    band: tuple[float | None, float | None] | None = None  # the reference band (lower, upper)
    sequential: Mapping[str, Any] | None = None  # the detector's update: fed, degraded, evidence
    verdicts: Mapping[str, bool | None] = field(default_factory=dict)  # DECISION_KINDS → verdict

    def verdict(self, kind: str) -> bool | None:
        """True breach, False fine, None undecided (or a kind this check did not decide)."""
        return self.verdicts[kind] if kind in self.verdicts else None

    @property
    def breached(self) -> list[str]:
        return [k for k in DECISION_KINDS if self.verdict(k) is True]

    @property
    def evidence(self) -> Mapping[str, Any] | None:
        """The sequential detector's last detection (error before/after, label number), if any."""
        evidence = _json(self.sequential).get("evidence")
        return evidence if isinstance(evidence, Mapping) else None


def decisions_read(raw: object) -> StoredDecisions:
    stored = _json(raw)
    verdicts = {k: stored[k] if isinstance(stored.get(k), bool) else None for k in DECISION_KINDS}
    values = _present(StoredDecisions, stored)
    for key in ("value", "baseline", "tolerance", "threshold", "estimate_threshold"):
        if key in values:
            values[key] = number(values[key])
    band = _json(values.get("band"))
    values["band"] = (number(band.get("lower")), number(band.get("upper"))) if band else None
    values["usable_for_training"] = values.get("usable_for_training") is True  # only a stored true
    return StoredDecisions(**values, verdicts=verdicts)


@dataclass(frozen=True)
class StoredMetricEstimate:
    """One metric's estimate. Defaults: no value, no interval, not yet paired with labels."""

    value: float | None = None
    ci: tuple[float | None, float | None] | None = None
    realised: float | None = None
    error: float | None = None


def _estimate_values(cls: type[Any], raw: object) -> dict[str, Any]:
    """An estimate's stored keys that are fields of ``cls``, numbers and its interval checked."""
    stored = _present(cls, _json(raw))
    for key in ("value", "realised", "error"):
        if key in stored:
            stored[key] = number(stored[key])
    if "ci" in stored:
        stored["ci"] = pair(stored["ci"])
    return stored


@dataclass(frozen=True)
class StoredEstimate:
    """``QualityCheck.estimated``. Defaults: metric "accuracy" (CBPE's; DLE stores "mae"), no
    value, available unless the check said why not (``reason``), no per-metric estimates (a
    check stored before they existed: ``of`` falls back to the top-level metric)."""

    metric: str = "accuracy"
    value: float | None = None
    ci: tuple[float | None, float | None] | None = None
    method: str | None = None
    available: bool = True
    reason: str | None = None
    realised: float | None = None
    error: float | None = None
    metrics: Mapping[str, StoredMetricEstimate] = field(default_factory=dict)

    def of(self, metric: str) -> StoredMetricEstimate | None:
        """The estimate of ``metric`` (any name the method estimates); None when not estimated."""
        if metric in self.metrics:
            return self.metrics[metric]
        if metric == self.metric and self.value is not None:
            return StoredMetricEstimate(self.value, self.ci, self.realised, self.error)
        return None


def estimate_read(raw: object) -> StoredEstimate:
    stored = _estimate_values(StoredEstimate, raw)
    if "metrics" in stored:
        stored["metrics"] = {
            str(name): StoredMetricEstimate(**_estimate_values(StoredMetricEstimate, entry))
            for name, entry in _json(stored["metrics"]).items()
        }
    return StoredEstimate(**stored)


@dataclass(frozen=True)
class StoredScore:
    """One stored drift score: a feature's (``drift.columns[name]``), the prediction's
    (``prediction_drift``) or the multivariate one (``drift.multivariate``, with its ``band``).
    Defaults: not tested (no method, no score), not drifted; ``higher_is_drift`` None reads as a
    distance (drift above the threshold), as the engine stores for every distance."""

    column_type: str | None = None
    method: str | None = None
    method_display: str | None = None
    score: float | None = None
    threshold: float | None = None
    drifted: bool = False
    n_reference: int = 0
    n_current: int = 0
    note: str | None = None
    higher_is_drift: bool | None = None
    band: tuple[float | None, float | None] | None = None

    @property
    def is_p_value(self) -> bool:
        """A p-value drifts below its threshold; a distance or an error above it."""
        return self.higher_is_drift is False

    @property
    def name(self) -> str:
        return self.method_display or self.method or "score"


def score_read(raw: object) -> StoredScore | None:
    """None when the score was not measured (absent or ``{}``)."""
    stored = _json(raw)
    if not stored:
        return None
    values = _present(StoredScore, stored)
    for key in ("score", "threshold"):
        if key in values:
            values[key] = number(values[key])
    if "band" in values:
        values["band"] = pair(values["band"])
    values["drifted"] = bool(values.get("drifted", False))
    return StoredScore(**values)


@dataclass(frozen=True)
class StoredDrift:
    """``QualityCheck.drift``. Defaults: no column measured, no share, dataset drift undecided,
    no multivariate score, no descriptors (feature -> descriptor -> score, text features)."""

    columns: Mapping[str, StoredScore] = field(default_factory=dict)
    share: float | None = None
    dataset_drift: bool | None = None
    multivariate: StoredScore | None = None
    descriptors: Mapping[str, Mapping[str, StoredScore]] = field(default_factory=dict)

    @property
    def drifted_columns(self) -> list[str]:
        return [n for n, c in self.columns.items() if c.drifted]


def drift_read(raw: object) -> StoredDrift:
    stored = _json(raw)
    columns = {str(n): s for n, c in _json(stored.get("columns")).items() if (s := score_read(c))}
    dataset_drift = stored.get("dataset_drift")
    return StoredDrift(
        columns=columns,
        share=number(stored.get("share")),
        dataset_drift=dataset_drift if isinstance(dataset_drift, bool) else None,
        multivariate=score_read(stored.get("multivariate")),
        descriptors={
            str(feature): {str(d): s for d, e in _json(entries).items() if (s := score_read(e))}
            for feature, entries in _json(stored.get("descriptors")).items()
        },
    )


@dataclass(frozen=True)
class StoredColumnQuality:
    """One feature's data quality. Defaults: nothing counted (None), no examples."""

    missing_count: int | None = None
    missing_share: float | None = None
    out_of_schema_count: int | None = None
    out_of_schema_share: float | None = None
    out_of_schema_examples: tuple[Any, ...] = ()


@dataclass(frozen=True)
class StoredDataQuality:
    """``QualityCheck.data_quality``. Defaults: not assessed (``broken_feed`` None), no reasons."""

    columns: Mapping[str, StoredColumnQuality] = field(default_factory=dict)
    broken_feed: bool | None = None
    reasons: tuple[str, ...] = ()


def data_quality_read(raw: object) -> StoredDataQuality:
    stored = _json(raw)
    columns = {}
    for name, column in _json(stored.get("columns")).items():
        values = _present(StoredColumnQuality, _json(column))
        values["out_of_schema_examples"] = tuple(values.get("out_of_schema_examples") or ())
        for key in ("missing_share", "out_of_schema_share"):
            if key in values:
                values[key] = number(values[key])
        columns[str(name)] = StoredColumnQuality(**values)
    broken = stored.get("broken_feed")
    return StoredDataQuality(
        columns=columns,
        broken_feed=broken if isinstance(broken, bool) else None,
        reasons=tuple(str(r) for r in stored.get("reasons") or ()),
    )


NOT_SCALARS = frozenset({"per_class", "confusion_matrix"})


@dataclass(frozen=True)
class StoredMetrics:
    """Realised metrics (``QualityCheck.metrics``, or one version's in ``per_version``), looked up
    by name: a metric not computed (too few labels, another task) reads as None."""

    values: Mapping[str, Any] = field(default_factory=dict)

    def value(self, metric: str) -> float | None:
        return number(self.values[metric]) if metric in self.values else None

    @property
    def n(self) -> int | None:
        """The labelled samples the metrics were computed on."""
        n = self.values["n"] if "n" in self.values else None
        return n if isinstance(n, int) and not isinstance(n, bool) else None

    def interval(self, metric: str) -> tuple[float | None, float | None] | None:
        key = f"{metric}_ci"
        return pair(self.values[key]) if key in self.values else None

    @property
    def scalars(self) -> list[tuple[str, Any]]:
        """Each metric with one value (not its interval, not the per-class or confusion tables)."""
        return [(k, v) for k, v in self.values.items() if k not in NOT_SCALARS and not k.endswith("_ci")]

    @property
    def per_class(self) -> Mapping[str, Any]:
        return _json(self.values["per_class"]) if "per_class" in self.values else {}

    @property
    def confusion_matrix(self) -> list[list[int]]:
        matrix = self.values["confusion_matrix"] if "confusion_matrix" in self.values else None
        return matrix if isinstance(matrix, list) else []


def metrics_read(raw: object) -> StoredMetrics:
    return StoredMetrics(_json(raw))


def per_version_read(raw: object) -> dict[str, StoredMetrics]:
    """``QualityCheck.per_version``: version name ("v3", "unversioned") → its metrics."""
    return {str(name): metrics_read(m) for name, m in _json(raw).items()}


@dataclass(frozen=True)
class StoredLabels:
    """``QualityCheck.labels``. Defaults: coverage and delays unknown (None)."""

    n: int | None = None
    n_labelled: int | None = None
    label_coverage: float | None = None
    label_delay_median_s: float | None = None
    label_delay_p90_s: float | None = None
    label_delay_max_s: float | None = None


def labels_read(raw: object) -> StoredLabels:
    values: dict[str, Any] = _present(StoredLabels, _json(raw))
    for key in values:
        if key.startswith("label_"):
            values[key] = number(values[key])
    return StoredLabels(**values)


@dataclass(frozen=True)
class StoredCheck:
    """All eight JSON columns of one check, read."""

    metrics: StoredMetrics
    estimated: StoredEstimate
    per_version: dict[str, StoredMetrics]
    labels: StoredLabels
    drift: StoredDrift
    prediction_drift: StoredScore | None
    data_quality: StoredDataQuality
    decisions: StoredDecisions


def check_read(columns: Mapping[str, object]) -> StoredCheck:
    """``columns``: the eight JSON columns by name (a missing one reads as ``{}``)."""

    def column(name: str) -> object:
        return columns[name] if name in columns else None

    return StoredCheck(
        metrics=metrics_read(column("metrics")),
        estimated=estimate_read(column("estimated")),
        per_version=per_version_read(column("per_version")),
        labels=labels_read(column("labels")),
        drift=drift_read(column("drift")),
        prediction_drift=score_read(column("prediction_drift")),
        data_quality=data_quality_read(column("data_quality")),
        decisions=decisions_read(column("decisions")),
    )
