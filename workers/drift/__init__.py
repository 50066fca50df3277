"""Django-free drift and quality engine.

- ``engine``: ``data_drift`` / ``prediction_drift`` with evidently 0.7.23's default decisions;
- ``summary``: ``summarize_reference`` → ``ReferenceSummary`` (computed once per version);
- ``quality``: metrics with labels; ``estimation``: label-free accuracy estimate (CBPE);
- ``data_quality``: missing values, out-of-schema categories, broken feeds;
- ``decisions``: a check's numbers against the policy's thresholds (breach / fine / undecided);
- ``evidently_adapter``: the only module importing evidently (HTML report, parity runs);
- ``columns``: a window as a DataFrame, a mapping of arrays or a pyarrow Table, read alike.

What a column's type means (its summary, default test, distribution, quality rules) is asked of
the feature-type registry, ``workers.features``.
"""

from workers.drift.data_quality import data_quality
from workers.drift.engine import (
    ColumnDrift,
    DriftResult,
    column_drift,
    data_drift,
    prediction_drift,
)
from workers.drift.estimation import (
    ClassCalibrator,
    ConfidenceCalibrator,
    calibration_problem,
    estimate_accuracy,
    estimation_error,
    fit_confidence_calibrator,
)
from workers.drift.quality import classification_metrics, label_stats, regression_metrics
from workers.drift.summary import ReferenceSummary, summarize_reference

__all__ = [
    "ClassCalibrator",
    "ColumnDrift",
    "ConfidenceCalibrator",
    "DriftResult",
    "ReferenceSummary",
    "calibration_problem",
    "classification_metrics",
    "column_drift",
    "data_drift",
    "data_quality",
    "estimate_accuracy",
    "estimation_error",
    "fit_confidence_calibrator",
    "label_stats",
    "prediction_drift",
    "regression_metrics",
    "summarize_reference",
]
