"""The monitoring policy's rules: which metric fits which task, and every field's valid values.

One validator serves the API's PATCH (a 400 naming each bad field, nothing stored) and the
model's clean() (the admin), so neither can store NaN, a negative tolerance or k > n.
"""

import math
from typing import TYPE_CHECKING, Any

from django.db import models

from core.errors import FieldError, InvalidInput
from core.outbound import target_problem
from monitoring.segment_rules import SEGMENT_LIMIT_RANGE, segments_errors
from workers.drift import thresholds
from workers.drift.cbpe import BINARY_METRICS
from workers.features import feature_type

if TYPE_CHECKING:  # the model imports these rules for its clean(): only its type is needed here
    from monitoring.models import MonitoringPolicy

# Every metric CBPE/DLE estimates can be the policy's (precision, recall, f1: a binary model's
# positive class; a multiclass model has no value for them and so never decides on them).
CLASSIFICATION_METRICS = BINARY_METRICS
REGRESSION_METRICS = ("mae", "rmse", "r2", "mse")
DEFAULT_METRIC = {"classification": "accuracy", "regression": "mae"}
PAGERDUTY_EVENTS_URL = "https://events.pagerduty.com/v2/enqueue"


class WindowKind(models.TextChoices):
    HOURS = "hours", "last N hours"
    SAMPLES = "samples", "last N samples"
    LABELLED = "labelled", "last N labelled samples"


class ThresholdRule(models.TextChoices):
    REFERENCE_BAND = thresholds.REFERENCE_BAND, "mean ± k sd of the reference's windows"
    ABSOLUTE = thresholds.ABSOLUTE, "baseline ± tolerance"
    RELATIVE = thresholds.RELATIVE, "baseline ± a fraction of it"


POLICY_FIELDS = [
    "enabled",
    "window_kind",
    "window_size",
    "check_every_minutes",
    "min_samples",
    "min_labels",
    "metric",
    "threshold_rule",
    "tolerance",
    "relative_tolerance",
    "band_sigmas",
    "baseline",
    "drift_share",
    "embedding_drift_method",
    "alert_k",
    "alert_n",
    "resolve_after",
    "cooldown_minutes",
    "sequential_detector",
    "auto_retrain",
    "segment_limit",
    "payload_retention_days",
]
# Fields the API reads and writes beside those (the page's form has no input for a JSON list).
JSON_FIELDS = ["segments"]
API_POLICY_FIELDS = [*POLICY_FIELDS, *JSON_FIELDS]
BOOLEANS = {"enabled", "auto_retrain", "sequential_detector"}
# field -> smallest allowed value
INTEGERS = {
    "window_size": 1,
    "check_every_minutes": 1,
    "min_samples": 0,
    "min_labels": 0,
    "alert_k": 1,
    "alert_n": 1,
    "resolve_after": 1,
    "cooldown_minutes": 0,
    "segment_limit": SEGMENT_LIMIT_RANGE[0],
    "payload_retention_days": 0,
}
MAX_INTEGER = 2_147_483_647  # PositiveIntegerField's column
# Upper bounds of every duration and count: past them a window's datetime arithmetic overflows
# (2**31 hours is an OverflowError in every check) or a check would load more rows than it can hold.
MINUTES_PER_YEAR = 366 * 24 * 60
MAX_WINDOW_HOURS = 366 * 24
MAX_WINDOW_SAMPLES = 1_000_000
MAX_RETENTION_DAYS = 100 * 366  # past it the cutoff's datetime arithmetic overflows soon enough
# Fields whose null is a value (baseline: none set; payload_retention_days: keep forever).
NULLABLE = {"baseline", "payload_retention_days"}
UPPER = {
    "window_size": MAX_WINDOW_SAMPLES,
    "check_every_minutes": MINUTES_PER_YEAR,
    "min_samples": MAX_WINDOW_SAMPLES,
    "min_labels": MAX_WINDOW_SAMPLES,
    "alert_k": 100,
    "alert_n": 100,
    "resolve_after": 100,
    "cooldown_minutes": MINUTES_PER_YEAR,
    "segment_limit": SEGMENT_LIMIT_RANGE[1],
    "payload_retention_days": MAX_RETENTION_DAYS,
}
NUMBERS = {"tolerance", "relative_tolerance", "band_sigmas", "baseline", "drift_share"}
# field -> the feature type whose drift method it picks, from the methods that type declares
DRIFT_METHOD_FIELDS = {"embedding_drift_method": "embedding"}


def drift_methods_for(field: str) -> tuple[str, ...]:
    return feature_type(DRIFT_METHOD_FIELDS[field]).methods()


def policy_drift_methods(policy: "MonitoringPolicy") -> dict[str, str]:
    """The drift method per feature type the policy picks (what ``data_drift`` takes)."""
    return {kind: getattr(policy, field) for field, kind in DRIFT_METHOD_FIELDS.items()}


def metrics_for(task: str) -> tuple[str, ...]:
    return CLASSIFICATION_METRICS if task == "classification" else REGRESSION_METRICS


def default_metric(task: str) -> str:
    return DEFAULT_METRIC.get(task, "accuracy")


def _type_error(field: str, value: Any) -> str | None:
    if field in BOOLEANS:
        return None if isinstance(value, bool) else "must be true or false"
    if field in INTEGERS:
        if value is None and field in NULLABLE:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            return "must be an integer"
        if not INTEGERS[field] <= value <= MAX_INTEGER:
            return f"must be between {INTEGERS[field]} and {MAX_INTEGER}"
        return None
    if field in NUMBERS:
        if value is None and field in NULLABLE:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            return "must be a number"
        return None if math.isfinite(value) else "must be finite"
    if field in JSON_FIELDS:
        return None  # any JSON here; policy_errors names what is wrong in it, row by row
    if field in ("window_kind", "metric", "threshold_rule", *DRIFT_METHOD_FIELDS):
        return None if isinstance(value, str) else "must be a string"
    return "unknown policy field"


def policy_errors(policy: "MonitoringPolicy", task: str) -> list[FieldError]:
    """What is wrong with a policy's values as they stand (types checked beforehand)."""
    errors = []

    def add(field: str, message: str) -> None:
        errors.append(FieldError(None, field, message))

    if policy.window_kind not in WindowKind.values:
        add("window_kind", f"must be one of {', '.join(WindowKind.values)}")
    for field, high in UPPER.items():
        if isinstance(getattr(policy, field), int) and getattr(policy, field) > high:
            add(field, f"must be at most {high:,}")
    if policy.window_kind == WindowKind.HOURS and 0 < policy.window_size <= UPPER["window_size"]:
        if policy.window_size > MAX_WINDOW_HOURS:
            add("window_size", f"an hours window is at most {MAX_WINDOW_HOURS:,} hours (a year)")
    if policy.metric not in metrics_for(task):
        add("metric", f"must be one of {', '.join(metrics_for(task))} for a {task} model")
    if policy.threshold_rule not in ThresholdRule.values:
        add("threshold_rule", f"must be one of {', '.join(ThresholdRule.values)}")
    for field in ("tolerance", "relative_tolerance"):
        if not (isinstance(getattr(policy, field), int | float) and math.isfinite(getattr(policy, field))):
            add(field, "must be a finite number")
        elif getattr(policy, field) < 0:
            add(field, "must be >= 0")
    if not (isinstance(policy.band_sigmas, int | float) and 0 < policy.band_sigmas <= 100):
        add("band_sigmas", "must be in (0, 100]")
    if not (isinstance(policy.drift_share, int | float) and 0 < policy.drift_share <= 1):
        add("drift_share", "must be in (0, 1]")
    for field in DRIFT_METHOD_FIELDS:
        if getattr(policy, field) not in (methods := drift_methods_for(field)):
            add(field, f"must be one of {', '.join(methods)}")
    if policy.baseline is not None and not math.isfinite(policy.baseline):
        add("baseline", "must be finite")
    if policy.alert_k > policy.alert_n:
        add("alert_k", f"must be <= alert_n ({policy.alert_n})")
    for field in ("webhook_url", "slack_webhook_url"):
        if getattr(policy, field) and (problem := target_problem(getattr(policy, field))):
            add(field, problem)
    errors += segments_errors(policy.segments, policy.model.feature_types)
    if policy.pagerduty_routing_key and (problem := target_problem(policy.pagerduty_url)):
        add("pagerduty_url", problem)
    return errors


def policy_update(*, policy: "MonitoringPolicy", changes: Any) -> "MonitoringPolicy":
    """Apply a PATCH: every bad field is a 400 naming it, and nothing is stored unless all pass."""
    if not isinstance(changes, dict):
        raise InvalidInput([FieldError(None, "body", "must be a JSON object")])
    errors = [
        FieldError(None, field, message)
        for field, value in changes.items()
        if (message := _type_error(field, value)) is not None
    ]
    if errors:
        raise InvalidInput(errors)
    for field, value in changes.items():
        setattr(policy, field, float(value) if field in NUMBERS and value is not None else value)
    errors = policy_errors(policy, policy.model.task)
    if errors:
        raise InvalidInput(errors)
    policy.save()
    return policy
