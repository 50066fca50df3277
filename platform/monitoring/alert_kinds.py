"""The alert kinds, one registry: each kind's decision, label, short label, message, severity,
whether it is drift, and whether it asks for a retrain (issue 20 §2.2, §2.5).

Every page, message, trigger and count reads the kinds from here (``alert_kind``); a kind is the
check decision of the same name (``workers.drift.result.DECISION_KINDS``), so a check that
decides True on it may open its alert. ``AlertKind`` (the model's choices) names the same kinds.
The order is the order badges are shown in.
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from monitoring.models import AlertKind, Severity
from workers.drift.result import StoredCheck, StoredDecisions, StoredScore


def fixed(value: float | None, digits: int = 4) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def drift_score_text(score: StoredScore | None) -> str:
    """One drift test's result as every page and message names it: "Z-test p_value 0.0307
    (threshold 0.0500)"."""
    if score is None:
        return "score —"
    text = f"{score.name} {fixed(score.score)}"
    return text + (f" (threshold {score.threshold:.4f})" if score.threshold is not None else "")


def _against_baseline(d: StoredDecisions) -> str:
    """The threshold and the rule that set it (a check stored before rules: baseline and tolerance)."""
    return _against(d, d.threshold)


def _against(d: StoredDecisions, threshold: float | None) -> str:
    if d.rule is None or d.rule_text is None:
        return f"vs baseline {fixed(d.baseline)} (tolerance {fixed(d.tolerance)})"
    return f"vs baseline {fixed(d.baseline)} (threshold {fixed(threshold)}; rule: {d.rule_text})"


def _accuracy_drop(check: StoredCheck) -> str:
    d, evidence = check.decisions, check.decisions.evidence
    if d.accuracy_drop_by and evidence:
        return (
            f"error rate {evidence['error_before']:.4f} -> {evidence['error_after']:.4f} "
            f"(ADWIN, at label {evidence['label_number']}; window {d.metric} {fixed(d.value)})"
        )
    return f"{d.metric} {fixed(d.value)} {_against_baseline(d)}"


def _estimated_accuracy_drop(check: StoredCheck) -> str:
    estimate = check.estimated
    return (
        f"estimated {estimate.metric} {fixed(estimate.value)} (no labels needed) "
        f"{_against(check.decisions, check.decisions.estimate_threshold)}"
    )


def _data_drift(check: StoredCheck) -> str:
    drifted = check.drift.drifted_columns
    total = len(check.drift.columns)
    return f"data drift: {len(drifted)} of {total} feature(s) drifted ({', '.join(drifted[:8])})"


def _multivariate_drift(check: StoredCheck) -> str:
    score = check.drift.multivariate
    band = score.band if score is not None else None
    edges = f"[{fixed(band[0])}, {fixed(band[1])}]" if band is not None else "—"
    value = score.score if score is not None else None
    return f"multivariate drift: PCA reconstruction error {fixed(value)} outside {edges}"


def _prediction_drift(check: StoredCheck) -> str:
    return f"prediction drift: {drift_score_text(check.prediction_drift)}"


def _data_quality(check: StoredCheck) -> str:
    return "broken feed: " + "; ".join(check.data_quality.reasons)


def _warning(decisions: StoredDecisions) -> str:
    return Severity.WARNING


def _critical(decisions: StoredDecisions) -> str:
    return Severity.CRITICAL


def _accuracy_severity(d: StoredDecisions) -> str:
    """Critical when the metric is more than twice the tolerance past the baseline (under the
    band: its mean, and its distance to the bad edge)."""
    if d.value is None or d.baseline is None or d.tolerance is None:
        return Severity.WARNING
    return Severity.CRITICAL if abs(d.baseline - d.value) > 2 * d.tolerance else Severity.WARNING


@dataclass(frozen=True)
class AlertKindSpec:
    kind: str  # the AlertKind value, and the decision it comes from
    label: str  # "accuracy drop"
    short: str  # a table's badge: "acc"
    message: Callable[[StoredCheck], str]  # the alert's text, from the check that opened or keeps it
    severity: Callable[[StoredDecisions], str] = _warning
    is_drift: bool = False  # counts as "drifting" on the home page
    retrains: bool = False  # an open alert asks for a retrain when the policy auto-retrains
    thresholded: bool = False  # decided by the policy's threshold rule (a quality metric)


ALERT_KINDS: Mapping[str, AlertKindSpec] = {
    spec.kind: spec
    for spec in (
        AlertKindSpec(
            AlertKind.ACCURACY_DROP,
            "accuracy drop",
            "acc",
            _accuracy_drop,
            _accuracy_severity,
            retrains=True,
            thresholded=True,
        ),
        AlertKindSpec(
            AlertKind.ESTIMATED_ACCURACY_DROP,
            "estimated accuracy drop",
            "est",
            _estimated_accuracy_drop,
            retrains=True,
            thresholded=True,
        ),
        AlertKindSpec(AlertKind.DATA_QUALITY, "broken feed", "dq", _data_quality, _critical),
        AlertKindSpec(AlertKind.DATA_DRIFT, "data drift", "drift", _data_drift, is_drift=True),
        AlertKindSpec(
            AlertKind.MULTIVARIATE_DRIFT, "multivariate drift", "mv", _multivariate_drift, is_drift=True
        ),
        AlertKindSpec(
            AlertKind.PREDICTION_DRIFT, "prediction drift", "pred", _prediction_drift, is_drift=True
        ),
    )
}


def alert_kind(kind: str) -> AlertKindSpec:
    """The kind's spec; an unknown kind is an error (KeyError), never a silent fallback."""
    return ALERT_KINDS[kind]


def alert_kind_retrains(kind: str) -> bool:
    """Does an alert of this kind ask for a retrain? The one answer monitoring (recording it on
    the alert) and retraining (the beat tick that requests jobs) both use."""
    return alert_kind(kind).retrains


def retrain_alert_kinds() -> list[str]:
    return [k for k, spec in ALERT_KINDS.items() if spec.retrains]


def drift_alert_kinds() -> list[str]:
    return [k for k, spec in ALERT_KINDS.items() if spec.is_drift]
