"""The reference side of a check, computed once per reference dataset and stored on its row:
the drift summary (a file), the confidence calibrator (CBPE) and the baseline metrics."""

import functools
from dataclasses import dataclass
from typing import Any

import pandas as pd
from django.core.files.base import ContentFile

from monitoring.window import probability_matrix
from registry.models import ReferenceDataset, RegisteredModel
from registry.reference import LABEL, PREDICTION
from workers.drift import ReferenceSummary, summarize_reference
from workers.drift.dle import LossEstimator, fit_loss_estimator
from workers.drift.estimation import ClassCalibrator, calibration_problem, fit_confidence_calibrator
from workers.drift.multivariate import PcaDrift, fit_pca_drift
from workers.drift.quality import classification_metrics, regression_metrics
from workers.drift.result import metrics_read
from workers.drift.thresholds import Band
from workers.drift.thresholds import reference_band as band_of
from workers.features import ColumnType, check_column_types, prediction_type


@dataclass(frozen=True)
class ReferenceState:
    reference_id: int
    rows: int
    summary: ReferenceSummary
    calibrator: ClassCalibrator | None
    baseline: dict[str, Any]
    estimate_unavailable: str | None = None  # why the reference cannot support an estimate
    loss_estimator: LossEstimator | None = None  # regressors: DLE's model of the absolute error
    multivariate: PcaDrift | None = None  # PCA reconstruction of the features
    summary_name: str = ""  # the summary file the state was loaded from (a cache key)


def drift_columns(model: RegisteredModel, frame: pd.DataFrame) -> dict[str, ColumnType]:
    """Features plus the prediction column, when the data has predictions."""
    columns = feature_columns(model)
    if PREDICTION in frame.columns and frame[PREDICTION].notna().any():
        columns[PREDICTION] = prediction_type(model.task)
    return columns


def feature_columns(model: RegisteredModel) -> dict[str, ColumnType]:
    """The schema's features as the drift engine's column types (registered feature types:
    validated at registration, and an unregistered one raises here rather than fall back)."""
    columns = model.feature_types
    check_column_types(columns)
    return columns


def reference_state(*, model: RegisteredModel) -> ReferenceState | None:
    reference = ReferenceDataset.objects.filter(model=model, is_active=True).first()
    if reference is None:
        return None
    if not reference.summary:
        _reference_prepare(reference)
    return _load(reference.pk, reference.summary.name)


@functools.lru_cache(maxsize=32)
def _load(reference_id: int, summary_name: str) -> ReferenceState:
    # Keyed by the summary file too: a re-prepared reference gets a new file name.
    reference = ReferenceDataset.objects.get(pk=reference_id)
    with reference.summary.open("rb") as handle:
        summary = ReferenceSummary.from_bytes(handle.read())
    # The band's cache holds the same rows: read once (0.5 s for 20,000 x 768 embeddings).
    frame = _cached_frame(reference_id, summary_name)
    model = reference.model
    stored = reference.calibrator or {}
    if "edges" in stored:
        # Stored before per-class calibration (it scored the argmax): refit from the rows.
        stored = _calibration(model, frame) or {}
    calibrator, unavailable = _calibrator(stored)
    return ReferenceState(
        reference.pk,
        reference.rows,
        summary,
        calibrator,
        reference.baseline_metrics or {},
        estimate_unavailable=unavailable,
        # Both are fitted here, once per reference and process (cached), from the stored rows.
        loss_estimator=_loss_estimator(model, frame),
        multivariate=fit_pca_drift(frame, dict(feature_columns(model))),
        summary_name=summary_name,
    )


def reference_band(*, reference: ReferenceState, metric: str, chunk_size: int, sigmas: float) -> Band | None:
    """The metric's band over the reference's chunks of one window (``workers.drift.thresholds``);
    None when the reference has too few chunks, or no logged predictions to score."""
    return _band(reference.reference_id, reference.summary_name, metric, chunk_size, sigmas)


@functools.lru_cache(maxsize=128)
def _band(reference_id: int, summary_name: str, metric: str, chunk_size: int, sigmas: float) -> Band | None:
    # Keyed like _load, plus the chunk size: an hours window's size is its own sample count.
    model = ReferenceDataset.objects.select_related("model").get(pk=reference_id).model
    frame = _cached_frame(reference_id, summary_name)
    if chunk_size * 2 > len(frame) or LABEL not in frame.columns:
        return None  # not even two windows: no variability to learn (and no rows read twice)
    return band_of(
        frame, metric, lambda chunk: chunk_metric(model, chunk, metric), chunk_size=chunk_size, sigmas=sigmas
    )


def chunk_metric(model: RegisteredModel, frame: pd.DataFrame, metric: str) -> float | None:
    """A realised metric of some labelled rows, by name (MSE from RMSE when not computed)."""
    metrics = metrics_read(_baseline(model, frame))
    value = metrics.value(metric)
    if value is None and metric == "mse" and (rmse := metrics.value("rmse")) is not None:
        return rmse * rmse
    return value


def _calibrator(stored: dict[str, Any]) -> tuple[ClassCalibrator | None, str | None]:
    """A stored (or freshly fitted) calibration as the estimator uses it, and why it cannot be."""
    calibrator = ClassCalibrator.from_dict(stored) if "maps" in stored else None
    unavailable = stored.get("unavailable")
    if calibrator is not None and calibrator.is_constant:
        # Fitted before degenerate references were refused: a constant map estimates a constant.
        calibrator, unavailable = None, "the calibration maps every confidence to one value"
    return calibrator, unavailable


def _frame(reference: ReferenceDataset) -> pd.DataFrame:
    with reference.file.open("rb") as handle:
        return pd.read_parquet(handle)


def _loss_estimator(model: RegisteredModel, frame: pd.DataFrame) -> LossEstimator | None:
    if model.is_classification or PREDICTION not in frame.columns or LABEL not in frame.columns:
        return None
    return fit_loss_estimator(frame, dict(feature_columns(model)), PREDICTION, LABEL)


def _reference_prepare(reference: ReferenceDataset) -> None:
    model = reference.model
    frame = _frame(reference)
    summary = summarize_reference(frame, drift_columns(model, frame))
    reference.summary.save(f"summary-{reference.pk}.bin", ContentFile(summary.to_bytes()), save=False)
    reference.baseline_metrics = _baseline(model, frame)
    calibration = _calibration(model, frame)
    if calibration is not None:
        reference.calibrator = calibration
    reference.save(update_fields=["summary", "baseline_metrics", "calibrator"])


def _calibration(model: RegisteredModel, frame: pd.DataFrame) -> dict[str, Any] | None:
    """CBPE's per-class calibration and decision rule (or why not), None without probabilities."""
    proba = probability_matrix(frame, list(model.classes)) if model.is_classification else None
    if proba is None or not frame[LABEL].notna().all():
        return None
    predictions = frame[PREDICTION] if PREDICTION in frame.columns else None
    problem = calibration_problem(proba, frame[LABEL], model.classes, predictions)
    if problem:
        return {"unavailable": problem}
    fitted = fit_confidence_calibrator(proba, frame[LABEL], model.classes, reference_predictions=predictions)
    return fitted.to_dict()


def _baseline(model: RegisteredModel, frame: pd.DataFrame) -> dict[str, Any]:
    """The model's own metrics on its reference rows (needs logged predictions there)."""
    if PREDICTION not in frame.columns or frame[PREDICTION].isna().any():
        return {}
    if model.is_classification:
        proba = probability_matrix(frame, list(model.classes))
        return dict(
            classification_metrics(
                frame[LABEL], frame[PREDICTION], classes=model.classes, probabilities=proba
            )
        )
    return dict(regression_metrics(frame[LABEL], frame[PREDICTION]))


# --- segments -----------------------------------------------------------------------------
# A segment is checked against the same segment of the reference (its own drift summary,
# calibration and baseline): a country whose inputs always differed from the whole is no drift.


def reference_frame(*, reference_id: int) -> pd.DataFrame | None:
    """The active reference's rows (cached per reference file), or None."""
    reference = ReferenceDataset.objects.filter(pk=reference_id).first()
    if reference is None or not reference.summary:
        return None
    return _cached_frame(reference.pk, reference.summary.name)


@functools.lru_cache(maxsize=8)
def _cached_frame(reference_id: int, summary_name: str) -> pd.DataFrame:
    return _frame(ReferenceDataset.objects.get(pk=reference_id))


def reference_state_of_rows(
    *, model: RegisteredModel, reference_id: int, frame: pd.DataFrame
) -> ReferenceState:
    """A reference state fitted on some of the reference's rows (one segment), as the whole
    reference's is; the caller caches it."""
    calibrator, unavailable = _calibrator(_calibration(model, frame) or {})
    return ReferenceState(
        reference_id,
        int(len(frame)),
        summarize_reference(frame, drift_columns(model, frame)),
        calibrator,
        _baseline(model, frame),
        estimate_unavailable=unavailable,
        loss_estimator=_loss_estimator(model, frame),
        multivariate=fit_pca_drift(frame, dict(feature_columns(model))),
    )
