"""The quality check service: one model over one window → one QualityCheck row and its alerts.

A check is idempotent: its row is keyed by (model, window spec, window end) and claimed by
compare-and-set; a finished check is never recomputed by the scheduler.
"""

import copy
import logging
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import numpy as np
import pandas as pd
from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from core.enqueue import enqueue
from monitoring.alerts import alerts_evaluate
from monitoring.fanout import (
    check_current,
    fanout_slices,
    fanout_start,
    merged_window,
    slice_files_delete,
    slices_labels,
    slices_of,
    slices_read,
)
from monitoring.models import CheckDistribution, CheckState, MonitoringPolicy, QualityCheck
from monitoring.policy import ThresholdRule, WindowKind, policy_drift_methods
from monitoring.reference import ReferenceState, drift_columns, reference_band, reference_state
from monitoring.segments import segments_compute, segments_realised_refresh
from monitoring.selectors import policy_for
from monitoring.sequential import DetectorUpdate, detector_feed
from monitoring.store.retention import retention_note
from monitoring.store.source import LabelsElsewhere, window_rows_bounds
from monitoring.window import (
    Window,
    WindowSpec,
    parse_window_spec,
    probability_matrix,
    window_label_count,
    window_load,
    window_sample_count,
)
from registry.models import ModelVersion, RegisteredModel, VersionStatus
from registry.reference import LABEL, PREDICTION, PROBA_PREFIX
from registry.schema import model_schema
from workers import queues
from workers.drift import data_drift, sorts
from workers.drift.cbpe import BINARY_METRICS, estimate_classifier_metrics
from workers.drift.data_quality import column_quality, counted_quality, quality_result
from workers.drift.decisions import Decisions, Thresholds, decisions_make, realised_decide
from workers.drift.descriptors import descriptor_drift
from workers.drift.distribution import DistributionDict, column_distribution, counted_distribution
from workers.drift.dle import (
    REGRESSOR_METRICS,
    estimate_regressor_metrics_by_block,
)
from workers.drift.engine import ColumnDrift, ColumnDriftDict, column_drift, counted_drift, drift_result
from workers.drift.estimation import Estimate
from workers.drift.multivariate import multivariate_drift, multivariate_from_sums
from workers.drift.quality import Metrics, classification_metrics, label_stats, regression_metrics
from workers.drift.result import (
    CheckResultDict,
    EstimatedDict,
    Measures,
    MetricEstimateDict,
    RealisedDict,
    VersionMetricsDict,
    estimate_read,
    metrics_read,
)
from workers.drift.sorts import each_column, release_column, shared_sample_positions, shared_sorts
from workers.drift.summary import ColumnType
from workers.drift.thresholds import MIN_BAND_CHUNKS

logger = logging.getLogger(__name__)

MAX_ATTEMPTS = 3
# A window whose features are deferred has DLE read them this many rows at a time: a 10M window's
# inputs read whole were all its features at once, and their encoded copy for the trees.
DLE_BLOCK_ROWS = 500_000


def stale_after() -> timedelta:
    """A check "running" this long under another owner was killed (a hard kill skips `finally`)."""
    return timedelta(seconds=settings.DRIFTWATCH_CHECK_STALE_SECONDS)


class _Superseded(Exception):
    """Our attempt at a check lost its row to a newer one (a redelivery took it over)."""


def _may_take_over(row: QualityCheck, owner: str, now: datetime) -> bool:
    if row.state == CheckState.SKIPPED:
        return True  # its window was empty: predictions may have arrived since (a backfill)
    if row.state == CheckState.DONE or row.attempts >= MAX_ATTEMPTS:
        return False
    if row.state != CheckState.RUNNING:
        return True  # failed: retry it
    # The broker redelivers a task only when its worker died (acks late, reject on worker lost),
    # so the same task id finding its own row running takes over at once.
    return (bool(owner) and row.owner == owner) or now - row.started_at >= stale_after()


def _claim(model: RegisteredModel, window: WindowSpec, owner: str) -> QualityCheck | None:
    """The row to compute into, or None when it is done or another worker holds it."""
    now = timezone.now()
    try:
        with transaction.atomic():
            return QualityCheck.objects.create(
                model=model,
                window_spec=window.spec,
                window_start=window.start or window.end,
                window_end=window.end,
                state=CheckState.RUNNING,
                started_at=now,
                attempts=1,
                owner=owner,
            )
    except IntegrityError:
        pass  # the row exists: decide below whether we may take it over
    row = QualityCheck.objects.get(model=model, window_spec=window.spec, window_end=window.end)
    if not _may_take_over(row, owner, now):
        return None  # finished, given up, or another live worker holds it
    taken = QualityCheck.objects.filter(pk=row.pk, state=row.state, attempts=row.attempts).update(
        state=CheckState.RUNNING, started_at=now, attempts=row.attempts + 1, error="", owner=owner
    )
    if taken != 1:
        return None  # another worker got there first
    logger.info("check %s taken over by %s (attempt %s)", row.pk, owner or "?", row.attempts + 1)
    row.refresh_from_db()
    return row


def check_runs_on_worker(*, model: RegisteredModel, window: WindowSpec) -> bool:
    """Whether a check asked for in a web request must be queued: its window holds more samples
    than DRIFTWATCH_SYNC_CHECK_SAMPLES (the web timeout would cut it short). A last-N window of
    at most that many is not; a range in the columnar store is decided by its hours' parts when
    their rows settle it (``window_rows_bounds``); else one count query on the index."""
    limit = settings.DRIFTWATCH_SYNC_CHECK_SAMPLES
    if settings.DRIFTWATCH_CHECK_FANOUT_ROWS:  # a check that fans out is a worker's
        limit = min(limit, settings.DRIFTWATCH_CHECK_FANOUT_ROWS)
    if window.last_n is not None and window.last_n <= limit:
        return False
    if window.last_n is None and settings.DRIFTWATCH_SAMPLE_SOURCE == "columnar":
        bounds = window_rows_bounds(model, window.start, window.end)
        if bounds is not None and (bounds[0] > limit or bounds[1] <= limit):
            return bounds[0] > limit
    count = window_sample_count(model=model, start=window.start, end=window.end, last_n=window.last_n)
    return count > limit


def check_enqueue(*, model: RegisteredModel, window: WindowSpec) -> QualityCheck:
    """The window's row, state queued, and one check_model task sent after commit (the worker
    claims the row as it claims a scheduled check). A row queued, running, or one no worker may
    take over (done, given up) is returned as it is, and nothing is sent."""
    now = timezone.now()
    try:
        with transaction.atomic():
            row = QualityCheck.objects.create(
                model=model,
                window_spec=window.spec,
                window_start=window.start or window.end,
                window_end=window.end,
                state=CheckState.QUEUED,
                started_at=now,
            )
    except IntegrityError:
        row = QualityCheck.objects.get(model=model, window_spec=window.spec, window_end=window.end)
        if row.state in (CheckState.QUEUED, CheckState.RUNNING) or not _may_take_over(row, "", now):
            return row
        requeued = QualityCheck.objects.filter(pk=row.pk, state=row.state, attempts=row.attempts).update(
            state=CheckState.QUEUED, started_at=now, error="", owner=""
        )
        row.refresh_from_db()
        if requeued != 1:
            return row  # another request or worker got there first
    enqueue(queues.CHECK_MODEL, args=[model.pk, window.spec, window.end.isoformat()])
    logger.info("check queued: check=%s model=%s window=%s", row.pk, model.pk, window.spec)
    return row


def quality_check_run(*, model_id: int, window: WindowSpec, owner: str = "") -> QualityCheck | None:
    """Compute and store a check; returns the (new or existing) row, None for a missing model.

    `owner` is the Celery task id (a redelivery of the same task takes its row over at once);
    callers outside a task get a fresh one.
    """
    owner = owner or f"local:{uuid.uuid4()}"
    model = RegisteredModel.objects.filter(pk=model_id).first()
    if model is None:
        logger.warning("check skipped: model %s no longer exists", model_id)
        return None
    row = _claim(model, window, owner)
    if row is None:
        logger.info("check not claimed (done or held): model=%s window=%s", model_id, window.spec)
        return QualityCheck.objects.get(model=model, window_spec=window.spec, window_end=window.end)
    logger.info(
        "check claimed: check=%s model=%s window=%s attempt=%s", row.pk, model_id, window.spec, row.attempts
    )
    try:
        _compute_into(row, model, window)
    except Exception as exc:
        logger.exception("check failed: check=%s model=%s", row.pk, model_id)
        # Only while still ours: a later owner's (or a finished) row is never marked failed.
        QualityCheck.objects.filter(pk=row.pk, state=CheckState.RUNNING, attempts=row.attempts).update(
            state=CheckState.FAILED, error=f"{type(exc).__name__}: {exc}", finished_at=timezone.now()
        )
        raise
    logger.info(
        "check %s: check=%s model=%s samples=%s labelled=%s%s",
        row.state,
        row.pk,
        model_id,
        row.n_samples,
        row.n_labelled,
        f" ({row.skipped_reason})" if row.skipped_reason else "",
    )
    return row


def _compute_into(row: QualityCheck, model: RegisteredModel, spec: WindowSpec) -> None:
    slices = fanout_slices(model, spec)
    if slices is not None:  # the slices' tasks measure it; the last one sends check_merge
        fanout_start(row, slices)
        return
    _finish(row, model, spec, _window(model, spec))


def _window(
    model: RegisteredModel, spec: WindowSpec, *, defer_above: int | None = None, labels: Any = None
) -> Window:
    # Past SAMPLE_ABOVE rows the PCA reads a sample of rows, so no step needs every feature at
    # once: the source may leave them to be read one at a time (``_features_measure``).
    return window_load(
        model=model,
        start=spec.start,
        end=spec.end,
        last_n=spec.last_n,
        labelled_only=spec.labelled_only,
        defer_above=sorts.SAMPLE_ABOVE if defer_above is None else defer_above,
        counted=True,
        labels=labels,
    )


def check_merge_run(*, check_id: int, attempt: int) -> QualityCheck | None:
    """Merge a fanned-out check's slices and compute and store the rest of it (the check_merge
    task, sent by its last slice) → the row, None when its attempt moved on or a slice is not
    done. The window is read with its features deferred: only the segments, DLE and features of
    types that do not merge read them."""
    slices = slices_of(check_id, attempt)
    row = QualityCheck.objects.select_related("model").filter(pk=check_id).first()
    if row is None or slices is None or not check_current(check_id, attempt):
        return None
    model, spec = row.model, parse_window_spec(row.window_spec, row.window_end)
    row.attempts = attempt
    try:
        found = slices_read(slices)
        try:  # with the labels the slices placed: the merge reads none
            window = _window(model, spec, defer_above=0, labels=slices_labels(found, model))
        except LabelsElsewhere:  # its parts changed since (a compaction, a late sample): read here
            logger.info("check %s: its window's parts changed since the slices: labels read here", row.pk)
            window = _window(model, spec, defer_above=0)
        merged = merged_window(window, found, model)
        if not merged:
            logger.info("check %s: its window changed since the slices: checked whole", row.pk)
            window = _window(model, spec)
        _finish(row, model, spec, window, fanout={"slices": len(slices), "merged": merged})
    except Exception as exc:
        logger.exception("check merge failed: check=%s model=%s", row.pk, model.pk)
        QualityCheck.objects.filter(pk=row.pk, state=CheckState.RUNNING, attempts=attempt).update(
            state=CheckState.FAILED, error=f"{type(exc).__name__}: {exc}", finished_at=timezone.now()
        )
        raise
    finally:
        if not check_current(check_id, attempt):  # stored (or failed): the slices' files go
            slice_files_delete(check_id, attempt)
    logger.info(
        "check %s: check=%s model=%s samples=%s (%s slices)",
        row.state,
        row.pk,
        model.pk,
        row.n_samples,
        len(slices),
    )
    return row


def _finish(
    row: QualityCheck,
    model: RegisteredModel,
    spec: WindowSpec,
    window: Window,
    *,
    fanout: dict[str, Any] | None = None,
) -> None:
    """Compute the check over its loaded window and store it, with its alerts, if the row is still
    this attempt's; ``fanout``: what the check says of its slices (``data_quality.fanout``: how
    many, and whether merged, or the window changed since and was checked whole)."""
    policy = policy_for(model)
    if window.frame.empty:
        _store_skipped(row, window, reason=skip_reason(spec))
        return
    reference = reference_state(model=model)
    # A window reaching before the retention cutoff has no raw features there: only what needs
    # predictions and labels runs, and the check says so.
    retention = retention_note(policy, window.start)
    result = check_compute(
        model=model, policy=policy, window=window, reference=reference, raw_features=retention is None
    )
    if fanout is not None:
        result["data_quality"] = {**result["data_quality"], "fanout": fanout}
    if retention is not None:
        # Counted features' tests ran from the hours' summaries, which retention keeps.
        kept = sorted(result["data_quality"].get("columns", {}))
        result["data_quality"] = {
            **result["data_quality"],
            "retention": {**retention, "from_summaries": kept},
        }
    distributions = result.pop("distributions", {})
    champion = ModelVersion.objects.filter(model=model, status=VersionStatus.CHAMPION).first()
    fields: dict[str, Any] = {
        **result,
        "window_start": window.start,
        "version": champion,
        "state": CheckState.DONE,
        "skipped_reason": "",
        "finished_at": timezone.now(),
        # The same computation once per segment value (monitoring.segments wraps it).
        "segments": {}
        if retention is not None
        else segments_compute(
            compute=check_compute, model=model, policy=policy, window=window, reference=reference
        ),
    }
    try:
        with transaction.atomic():
            if policy.sequential_detector:
                # In the check's transaction: a failed check feeds nothing, so no label counts twice.
                _sequential_decision(result["decisions"], detector_feed(model=model, known_by=spec.end))
            # Compare-and-set on our attempt: if a redelivery took the row over meanwhile, its
            # result is the one stored and alerted on; ours is rolled back (no double alert).
            stored = QualityCheck.objects.filter(pk=row.pk, state=CheckState.RUNNING, attempts=row.attempts)
            if stored.update(**fields) != 1:
                raise _Superseded
            _store_distributions(row, distributions)
            for key, value in fields.items():
                setattr(row, key, value)
            alerts_evaluate(check=row, policy=policy)
    except _Superseded:
        logger.warning("check %s: attempt %s lost its row to a newer one", row.pk, row.attempts)


def skip_reason(spec: WindowSpec) -> str:
    """Why a window had nothing to measure, in words: "no predictions between … and …"."""
    if spec.start is not None:
        return f"no predictions between {_utc_text(spec.start)} and {_utc_text(spec.end)}"
    kind = "labelled predictions" if spec.labelled_only else "predictions"
    return f"no {kind} before {_utc_text(spec.end)}"


def _utc_text(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def _store_skipped(row: QualityCheck, window: Window, *, reason: str) -> None:
    """An empty window is no result: no metrics, no detector feed (its labels wait for the next
    real check), no alert opened or resolved; the row only says why."""
    fields = {
        "state": CheckState.SKIPPED,
        "skipped_reason": reason,
        "window_start": window.start,
        "n_samples": 0,
        "n_labelled": 0,
        "finished_at": timezone.now(),
    }
    stored = QualityCheck.objects.filter(pk=row.pk, state=CheckState.RUNNING, attempts=row.attempts)
    if stored.update(**fields) != 1:
        logger.warning("check %s: attempt %s lost its row to a newer one", row.pk, row.attempts)
        return
    for key, value in fields.items():
        setattr(row, key, value)


def _sequential_decision(decisions: Decisions, update: DetectorUpdate) -> None:
    """The detector's evidence beside the window rule; a degradation it found is a breach."""
    decisions["sequential"] = update.to_dict()
    if update.degraded and decisions["accuracy_drop"] is not True:
        decisions["accuracy_drop"] = True
        decisions["accuracy_drop_by"] = "sequential detector"


def check_compute(
    *,
    model: RegisteredModel,
    policy: MonitoringPolicy,
    window: Window,
    reference: ReferenceState | None,
    raw_features: bool = True,
) -> CheckResultDict:
    """Pure computation over a loaded window: metrics, estimate, drift, data quality, decisions.
    Without ``raw_features`` (some were dropped by retention) no regression estimate, and input
    drift and data quality only of the features the window has counts of (``Window.counts``). Each column is sorted once for all the tests that need it sorted."""
    with shared_sorts():
        return _check_compute(
            model=model, policy=policy, window=window, reference=reference, raw_features=raw_features
        )


def _check_compute(
    *,
    model: RegisteredModel,
    policy: MonitoringPolicy,
    window: Window,
    reference: ReferenceState | None,
    raw_features: bool,
) -> CheckResultDict:
    frame = window.frame
    enough = len(frame) >= policy.min_samples
    realised = _realised(model, policy, frame)
    measures: Measures = {
        "metrics": realised["metrics"],
        # DLE (regression) estimates from the features; CBPE from the probabilities alone.
        "estimated": _estimate(model, window, reference, policy.metric)
        if enough and (raw_features or model.is_classification)
        else {},
        "drift": {},
        "prediction_drift": {},
        "data_quality": {},
    }
    distributions: dict[str, DistributionDict] | None = None
    if reference is not None and len(frame):
        columns = {n: t for n, t in drift_columns(model, frame).items() if n in reference.summary.columns}
        features = {n: t for n, t in columns.items() if n != PREDICTION}
        found = None
        if raw_features:
            found = _features_measure(window, reference, features, policy, drift=enough)
        elif counted := _counted(window, features, policy):  # the raw values are gone: their counts are not
            found = _features_measure(window, reference, counted, policy, drift=enough, multivariate=False)
        if found is not None:
            measures["data_quality"] = found.quality
            if enough:
                measures["drift"] = found.drift
        if enough and PREDICTION in columns:
            pred = data_drift(reference.summary, frame, {PREDICTION: columns[PREDICTION]})
            measures["prediction_drift"] = pred.columns[PREDICTION].to_dict()
        if enough:
            kept = {n: t for n, t in columns.items() if n == PREDICTION}
            distributions = {
                **(found.distributions if found else {}),
                **_distributions(reference, frame, kept),
            }
    _pair_estimate(measures["estimated"], measures["metrics"])
    out: CheckResultDict = {
        "n_samples": int(len(frame)),
        "n_labelled": realised["n_labelled"],
        "labels": realised["labels"],
        "metrics": measures["metrics"],
        "per_version": realised["per_version"],
        "estimated": measures["estimated"],
        "drift": measures["drift"],
        "prediction_drift": measures["prediction_drift"],
        "data_quality": measures["data_quality"],
        "decisions": decisions_make(
            measures, thresholds_for(policy, reference, n_samples=len(frame)), enough=enough
        ),
    }
    if distributions is not None:
        out["distributions"] = distributions
    return out


@dataclass
class _ColumnMeasures:
    quality: dict[str, Any]
    drift: ColumnDrift | None = None
    descriptors: dict[str, ColumnDriftDict] | None = None
    distribution: DistributionDict | None = None
    sample: np.ndarray | None = None  # the PCA's sampled rows of it, taken while it was read


@dataclass(frozen=True)
class _FeatureMeasures:
    quality: dict[str, Any]
    drift: dict[str, Any]  # DriftDict, with "descriptors" and "multivariate" where measured
    distributions: dict[str, DistributionDict]


def _features_measure(
    window: Window,
    reference: ReferenceState,
    features: dict[str, ColumnType],
    policy: MonitoringPolicy,
    *,
    drift: bool,
    multivariate: bool = True,
) -> _FeatureMeasures:
    """Data quality, and with ``drift`` each feature's drift, descriptors and drill-down, and the
    multivariate drift: a column at a time (on a thread per CPU for a large window), each
    column's tests one after another while it is read, the column then let go. A window whose
    features are deferred holds one column per thread, never all of them: 20 float64 features
    of 10M rows were 1.5 GiB held for the whole check. The same results as ``data_quality``,
    ``data_drift``, ``descriptor_drift`` and the drill-down run one after another. A feature
    the window has counts of (``Window.counts``, whole summarised hours) is measured on them,
    read only for the PCA's rows; without ``multivariate``, no PCA."""
    summary = reference.summary
    n = len(window.frame)
    missing = [name for name in features if not window.has(name)]
    if missing:
        raise ValueError(f"columns missing from the data: {missing}")
    allowed = summary.categories()
    methods = policy_drift_methods(policy)
    pca = reference.multivariate if drift and multivariate else None
    # A fanned-out check's PCA was scored by its slices, every row: the sum is merged.
    sums = window.pca_sums if pca is not None else None
    # Past SAMPLE_ABOVE rows the PCA reads a sample of rows: each of its columns' sample is taken
    # while the column is read, not by reading it again (a merged column is not in row order).
    scored_here = pca is not None and sums is None and not window.merged
    sampled = shared_sample_positions(n) if scored_here and n > sorts.SAMPLE_ABOVE else None

    counted_names = _counted(window, features, policy)

    def measure(name: str) -> _ColumnMeasures:
        if name in counted_names:
            return counted(name)
        values, kind = window.tested(name), features[name]
        out = _ColumnMeasures(column_quality(values, kind, allowed.get(name), n))
        if drift:
            out.drift = column_drift(summary.column(name), values, kind, methods.get(kind))
            out.descriptors = descriptor_drift(summary, {name: values}, {name: kind}).get(name)
            out.distribution = column_distribution(summary.column(name), values, kind)
            if sampled is not None and pca is not None and name in pca.columns:
                out.sample = values.to_numpy()[sampled]
        release_column(values)
        return out

    def counted(name: str) -> _ColumnMeasures:
        """A counted feature of a window of whole summarised hours: its tests on its counts, its
        values read only for the PCA's sample of rows."""
        counts, kind = window.counts[name], features[name]
        out = _ColumnMeasures(counted_quality(counts, kind, allowed.get(name), n))
        if drift:
            out.drift = counted_drift(summary.column(name), counts, kind)
            out.distribution = counted_distribution(summary.column(name), counts, kind)
            if sampled is not None and pca is not None and name in pca.columns:
                values = window.feature(name)
                out.sample = values.to_numpy()[sampled]
                release_column(values)
        return out

    names = list(features)
    found = dict(zip(names, each_column(measure, names, n), strict=True))
    quality = quality_result({name: m.quality for name, m in found.items()}, n)
    if not drift:
        return _FeatureMeasures(quality, {}, {})
    result: dict[str, Any] = dict(
        drift_result(
            {name: cast(ColumnDrift, m.drift) for name, m in found.items()}, policy.drift_share
        ).to_dict()
    )
    if descriptors := {name: m.descriptors for name, m in found.items() if m.descriptors}:
        result["descriptors"] = descriptors
    if pca is not None:
        if sums is not None:
            result["multivariate"] = multivariate_from_sums(pca, *sums)
        elif sampled is not None:
            rows = {
                c: found[c].sample if c in found else window.feature(c).to_numpy()[sampled]
                for c in pca.columns
            }
            result["multivariate"] = multivariate_drift(pca, pd.DataFrame(rows), sampled_from=n)
        else:
            result["multivariate"] = multivariate_drift(
                pca, window.with_features(pca.columns, categorical=True)
            )
    distributions = {name: m.distribution for name, m in found.items() if m.distribution is not None}
    return _FeatureMeasures(quality, result, distributions)


def _counted(
    window: Window, features: dict[str, ColumnType], policy: MonitoringPolicy
) -> dict[str, ColumnType]:
    """The features measured on the window's counts: counted, and tested by their type's own test
    (a method a policy picks may need the values)."""
    methods = policy_drift_methods(policy)
    return {name: kind for name, kind in features.items() if name in window.counts and kind not in methods}


def _distributions(
    reference: ReferenceState, frame: pd.DataFrame, columns: Mapping[str, ColumnType]
) -> dict[str, DistributionDict]:
    """Reference vs window per drift column (features and the prediction), for the drill-down."""
    names = list(columns)
    found = each_column(
        lambda name: column_distribution(reference.summary.column(name), frame[name], columns[name]),
        names,
        len(frame),
    )
    return {name: d for name, d in zip(names, found, strict=True) if d is not None}


def _store_distributions(check: QualityCheck, distributions: Mapping[str, DistributionDict]) -> None:
    """Replace the check's distributions (a re-run of the same window writes equal ones)."""
    CheckDistribution.objects.filter(quality_check=check).delete()
    CheckDistribution.objects.bulk_create(
        CheckDistribution(quality_check=check, column=name, psi=d["psi"], payload=d)
        for name, d in distributions.items()
    )


def _realised(model: RegisteredModel, policy: MonitoringPolicy, frame: pd.DataFrame) -> RealisedDict:
    """What the labels say: label stats, realised metrics, metrics per version."""
    # Only the columns the metrics read: taking every feature of 500,000 labelled rows out of a
    # 1M-row window copied them all (0.13 s) for nothing.
    needed = [LABEL, PREDICTION, "version_id", *(PROBA_PREFIX + str(c) for c in model.classes)]
    # Each column's own array masked (pandas' .loc gathered the 5,000,000 labelled rows of a 10M
    # window through its block take: 0.6 s, against 0.1 s).
    has_label = frame[LABEL].notna().to_numpy()
    labelled = pd.DataFrame(
        {c: frame[c].array[has_label] for c in needed if c in frame.columns},
        index=frame.index[has_label],
        copy=False,
    )
    metrics: Metrics | dict[str, Any] = (
        _metrics(model, labelled) if len(labelled) >= policy.min_labels else {}
    )
    return {
        "n_labelled": int(len(labelled)),
        "labels": label_stats(frame["timestamp"], frame["label_received_at"]),
        "metrics": metrics,
        "per_version": _per_version(model, labelled, policy.min_labels, whole=metrics),
    }


def _pair_estimate(estimated: EstimatedDict, metrics: Metrics | dict[str, Any]) -> None:
    """Put the realised metrics beside the label-free estimates: each estimate's own error."""
    read, realised = estimate_read(estimated), metrics_read(metrics)
    value = realised.value(read.metric)
    if read.value is not None and value is not None:
        estimated["realised"] = value
        estimated["error"] = read.value - value
    for name, entry in estimated.get("metrics", {}).items():
        value, guess = realised.value(name), read.metrics[name].value
        if guess is not None and value is not None:
            entry["realised"] = value
            entry["error"] = guess - value


def _segment_features(model: RegisteredModel, segments: Any) -> list[str]:
    """The features a refresh reads: those its stored segments are cut by (that the model still
    has), no other. The realised side needs labels, predictions and probabilities; a 10M window's
    twenty features were read and held for nothing (GiBs, seconds)."""
    kinds = model_schema(model).feature_kinds
    return [name for name in segments if name in kinds] if isinstance(segments, dict) else []


def check_labels_refresh(*, check: QualityCheck) -> bool:
    """Recompute the realised side of a finished check once more of its samples have labels.

    Labels often arrive after the check ran; the drift and the estimate taken then stay as they
    were, while the metrics, label stats and the estimate's error catch up, the realised breach
    is decided (``decisions.value``, ``accuracy_drop``, under the policy's threshold rule) and
    fed to the k-of-n series: the alert opens or resolves as a check with those labels would have.
    """
    model = check.model
    window = parse_window_spec(check.window_spec, check.window_end)
    if window.labelled_only:
        return False  # its rows are labelled already; newer labels make a different window
    labelled_now = window_label_count(model=model, start=window.start, end=window.end, last_n=window.last_n)
    if labelled_now <= check.n_labelled:
        return False
    loaded = window_load(
        model=model,
        start=window.start,
        end=window.end,
        last_n=window.last_n,
        columns=_segment_features(model, check.segments),
    )
    policy = policy_for(model)
    realised = _realised(model, policy, loaded.frame)
    estimated = cast(EstimatedDict, copy.deepcopy(check.estimated))  # as the engine stored it
    _pair_estimate(estimated, realised["metrics"])
    thresholds = thresholds_for(policy, reference_state(model=model), n_samples=check.n_samples)
    decisions = realised_decide(cast(Decisions, dict(check.decisions)), realised["metrics"], thresholds)
    fields = {
        **realised,
        "estimated": estimated,
        "decisions": decisions,
        # each segment's realised side too (its drift, estimate and decisions stay as decided)
        "segments": segments_realised_refresh(
            segments=check.segments,
            frame=loaded.frame,
            realise=lambda rows: _realised(model, policy, rows),
            pair=_pair_estimate,
        ),
        "labels_refreshed_at": timezone.now(),
    }
    with transaction.atomic():
        # Compare-and-set on the labels it saw: two refreshes of one check store and alert once.
        stored = QualityCheck.objects.filter(pk=check.pk, state=CheckState.DONE, n_labelled=check.n_labelled)
        if stored.update(**fields) != 1:
            return False
        for key, value in fields.items():
            setattr(check, key, value)
        alerts_evaluate(check=check, policy=policy, kinds=REALISED_KINDS)
    logger.info("check %s refreshed: model=%s labelled=%s", check.pk, model.pk, check.n_labelled)
    return True


# The decisions late labels change: the realised breach (the estimate and drift stay as taken).
REALISED_KINDS = ("accuracy_drop",)


REFRESH_FOR = timedelta(days=7)


def checks_labels_refresh(*, now: datetime | None = None) -> int:
    """Refresh every recent finished check that is not fully labelled yet, oldest first."""
    since = (now or timezone.now()) - REFRESH_FOR
    # Oldest first: each refreshed check joins the series as it would have, in window order.
    pending = (
        QualityCheck.objects.filter(state=CheckState.DONE, window_end__gte=since)
        .filter(n_labelled__lt=F("n_samples"))
        .select_related("model")
        .order_by("window_end", "pk")
    )
    return sum(check_labels_refresh(check=check) for check in pending)


def _metrics(model: RegisteredModel, labelled: pd.DataFrame) -> Metrics:
    if model.is_classification:
        proba = probability_matrix(labelled, list(model.classes))
        return classification_metrics(
            labelled[LABEL], labelled[PREDICTION], classes=model.classes, probabilities=proba
        )
    return regression_metrics(labelled[LABEL].to_numpy(float), labelled[PREDICTION].to_numpy(float))


def _per_version(
    model: RegisteredModel, labelled: pd.DataFrame, min_labels: int, *, whole: Metrics | dict[str, Any]
) -> dict[str, VersionMetricsDict]:
    """Metrics per model version; ``whole``: the metrics of all of ``labelled``, which a window
    served by one version reuses (computing them again was 0.5 s of a 1M-sample check)."""
    out: dict[str, VersionMetricsDict] = {}
    versions = dict(ModelVersion.objects.filter(model=model).values_list("pk", "version"))
    keys = pd.to_numeric(labelled["version_id"]).fillna(-1)
    if keys.nunique() == 1:  # one version served the window: its rows are all of them
        groups: Iterable[tuple[Any, pd.DataFrame]] = [(keys.iloc[0], labelled)]
    else:
        groups = labelled.groupby(keys)
    for version_id, group in groups:
        name = f"v{versions[int(version_id)]}" if int(version_id) in versions else "unversioned"
        if len(group) >= min_labels:
            alone = len(group) == len(labelled) and bool(whole)
            metrics = metrics_read(whole if alone else _metrics(model, group))
            out[name] = {
                "n": metrics.n,
                "accuracy": metrics.value("accuracy"),
                "f1_macro": metrics.value("f1_macro"),
                "mae": metrics.value("mae"),
                "rmse": metrics.value("rmse"),
                "r2": metrics.value("r2"),
            }
    return out


def _estimate(
    model: RegisteredModel, window: Window, reference: ReferenceState | None, metric: str
) -> EstimatedDict:
    frame = window.frame
    if not model.is_classification:
        return _estimate_regression(window, reference, metric)
    if reference is not None and reference.estimate_unavailable:
        # Say so rather than report a constant: a degenerate calibrator reads 1.000 forever.
        return _unavailable(reference.estimate_unavailable)
    if reference is None:
        return _unavailable("no reference dataset")
    if reference.calibrator is None:
        return _unavailable("the reference has no probabilities (and labels) to calibrate confidence on")
    proba = probability_matrix(frame, list(model.classes))
    if proba is None:
        return _unavailable("not every sample in the window logged its probabilities")
    estimates = estimate_classifier_metrics(reference.calibrator, proba, frame.get(PREDICTION))
    return _estimated(estimates, metric, "accuracy", "CBPE (calibrated confidence)")


def _estimated(estimates: Mapping[str, Estimate], metric: str, default: str, method: str) -> EstimatedDict:
    """Every metric's estimate under ``metrics``; the policy's metric (else ``default``) on top."""
    primary = metric if metric in estimates else default
    top = estimates[primary]
    found: EstimatedDict = {
        "metric": primary,
        "value": top.value,
        "ci": [top.low, top.high],
        "method": method,
        "metrics": {name: cast(MetricEstimateDict, e.to_dict()) for name, e in estimates.items()},
    }
    if top.sample is not None:  # made from a sample of the window's rows: its stated error
        found["sample"] = top.sample
    return found


def _unavailable(reason: str) -> EstimatedDict:
    """An estimate that could not be made, and why (shown beside the check)."""
    return {"metric": "accuracy", "value": None, "available": False, "reason": reason}


def _estimate_regression(window: Window, reference: ReferenceState | None, metric: str) -> EstimatedDict:
    if reference is None or reference.loss_estimator is None or window.frame[PREDICTION].isna().any():
        return {}
    estimator = reference.loss_estimator
    inputs = [name for name in estimator.columns if window.has(name) and name not in window.frame.columns]
    of = n = len(window.frame)
    if n > sorts.SAMPLE_ABOVE:
        # The trees on a uniform sample of SAMPLE_SIZE rows, its error stated and the interval
        # widened by it (3M rows: 15 s of the two loss models' trees on every row).
        mask = np.zeros(n, dtype=bool)
        mask[shared_sample_positions(n)] = True
        window = window.rows(mask)
        n = len(window.frame)
    if inputs and n > DLE_BLOCK_ROWS and window.deferred is not None and window.deferred.reads_rows(inputs):
        # Deferred features a block of rows at a time, each block's rows alone read.
        blocks = (window.block(lo, min(lo + DLE_BLOCK_ROWS, n), inputs) for lo in range(0, n, DLE_BLOCK_ROWS))
        estimates = estimate_regressor_metrics_by_block(estimator, blocks, of=of)
    else:
        estimates = estimate_regressor_metrics_by_block(estimator, [window.with_features(inputs)], of=of)
    return _estimated(estimates, metric, "mae", "DLE (direct loss estimation)")


def _baseline_value(policy: MonitoringPolicy, reference: ReferenceState | None) -> float | None:
    if policy.baseline is not None:
        return policy.baseline
    if reference is None:
        return None
    value = reference.baseline.get(policy.metric)
    return float(value) if value is not None else None


ESTIMATED_METRICS = frozenset((*BINARY_METRICS, *REGRESSOR_METRICS))  # CBPE's and DLE's names


def band_chunk_size(policy: MonitoringPolicy, n_samples: int) -> int:
    """One window's size in reference rows: a samples window's N, else the window's own count
    (an hours window holds what the traffic brought; its variability is that of so many rows)."""
    return policy.window_size if policy.window_kind != WindowKind.HOURS else n_samples


def thresholds_for(
    policy: MonitoringPolicy, reference: ReferenceState | None, *, n_samples: int
) -> Thresholds:
    """The policy's thresholds, with the baselines and the band the reference supplies. The
    label-free estimate of the policy's metric (CBPE's or DLE's) is held against the same band,
    or against what it reads on the reference itself under a tolerance rule."""
    expected = reference.baseline.get(policy.metric) if reference else None
    band, fallback = None, None
    if policy.threshold_rule == ThresholdRule.REFERENCE_BAND:
        size = band_chunk_size(policy, n_samples)
        if reference is not None:
            band = reference_band(
                reference=reference, metric=policy.metric, chunk_size=size, sigmas=policy.band_sigmas
            )
        if band is None:
            fallback = f"no reference band: the reference holds fewer than {MIN_BAND_CHUNKS} windows of {size} scored rows"
    return Thresholds(
        metric=policy.metric,
        tolerance=policy.tolerance,
        baseline=_baseline_value(policy, reference),
        estimate_baseline=float(expected) if policy.metric in ESTIMATED_METRICS and expected else None,
        rule=policy.threshold_rule,
        relative_tolerance=policy.relative_tolerance,
        band=band,
        fallback=fallback,
    )
