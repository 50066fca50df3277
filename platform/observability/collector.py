"""Gauges read at scrape time: a handful of aggregate queries, one family per question, so a
scrape costs the same whatever the history (each query reads per model or per device, never per
stored check or sample)."""

import logging
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from typing import Any, TypeGuard

from django.db import DatabaseError
from django.db.models import Count, FloatField, Min, OuterRef, Q, Subquery, Sum
from django.db.models.functions import Cast, Coalesce
from django.utils import timezone
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric

from core.models import OutboxMessage
from monitoring.models import Alert, AlertState, CheckState, QualityCheck
from observability.broker import queue_depths
from registry.models import RegisteredModel
from retraining.inventory import stale_after
from retraining.models import ACTIVE_STATES, GpuDevice, JobState, RetrainJob
from workers.drift.result import estimate_read, metrics_read

logger = logging.getLogger(__name__)

# Realised metrics a check stores (workers.drift.quality) that are one number.
QUALITY_METRICS = ("accuracy", "precision_macro", "recall_macro", "f1_macro", "roc_auc", "mae", "rmse", "r2")
# Estimated / measured peak: 1 is exact, below 1 an under-estimate (the OOM side). A ratio rather
# than a signed error: Prometheus histograms keep _sum and _count only for non-negative values.
ESTIMATOR_BUCKETS = (0.5, 0.75, 0.9, 0.95, 1.0, 1.05, 1.1, 1.25, 1.5, 2.0)
FINISHED_CHECK = (CheckState.DONE, CheckState.SKIPPED)


def _latest(states: Iterable[str]) -> Subquery:
    """The model's latest check in `states`: read backwards on the (model, -finished_at) index,
    so one probe per model whatever the history."""
    return Subquery(
        QualityCheck.objects.filter(model=OuterRef("pk"), state__in=list(states), finished_at__isnull=False)
        .order_by("-finished_at", "-pk")
        .values("pk")[:1]
    )


def _latest_checks() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Per model: its latest finished check (done or skipped) and its latest done one."""
    pairs = list(
        RegisteredModel.objects.annotate(finished=_latest(FINISHED_CHECK), done=_latest([CheckState.DONE]))
        .values_list("finished", "done")
        .order_by()
    )
    wanted = {i for pair in pairs for i in pair if i is not None}
    fields = ("model__name", "started_at", "finished_at", "metrics", "estimated", "drift__share")
    rows = {row["pk"]: row for row in QualityCheck.objects.filter(pk__in=wanted).values("pk", *fields)}
    finished = [rows[f] for f, _ in pairs if f in rows]
    done = [rows[d] for _, d in pairs if d in rows]
    return finished, done


def check_families(now: datetime) -> Iterator[Metric]:
    finished, done = _latest_checks()
    lag = GaugeMetricFamily(
        "driftwatch_check_lag_seconds",
        "Seconds since the model's last finished check (done or skipped) finished.",
        labels=["model"],
    )
    for row in finished:
        lag.add_metric([row["model__name"]], (now - row["finished_at"]).total_seconds())
    yield lag
    yield from _quality_families(done)


def _quality_families(done: list[dict[str, Any]]) -> Iterator[Metric]:
    duration = GaugeMetricFamily(
        "driftwatch_check_duration_seconds", "How long the model's latest done check ran.", labels=["model"]
    )
    realised = GaugeMetricFamily(
        "driftwatch_quality_realised",
        "Realised quality of the model's latest done check, on its labelled samples "
        "(absent until enough labels).",
        labels=["model", "metric"],
    )
    estimated = GaugeMetricFamily(
        "driftwatch_quality_estimated",
        "Label-free quality estimate (CBPE accuracy, DLE MAE) of the model's latest done check.",
        labels=["model", "metric"],
    )
    drift = GaugeMetricFamily(
        "driftwatch_drift_share",
        "Share of the model's features that drifted in its latest done check.",
        labels=["model"],
    )
    for row in done:
        name = row["model__name"]
        duration.add_metric([name], (row["finished_at"] - row["started_at"]).total_seconds())
        metrics = metrics_read(row["metrics"])  # stored check JSON is read only through its reader
        for metric in QUALITY_METRICS:
            value = metrics.value(metric)
            if value is not None:
                realised.add_metric([name, metric], value)
        guess = estimate_read(row["estimated"])
        if guess.value is not None:
            estimated.add_metric([name, guess.metric], guess.value)
        if _number(row["drift__share"]):
            drift.add_metric([name], float(row["drift__share"]))
    yield from (duration, realised, estimated, drift)


def _number(value: Any) -> TypeGuard[float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def alert_families(now: datetime) -> Iterator[Metric]:
    alerts = GaugeMetricFamily(
        "driftwatch_alerts_open",
        "Alerts not resolved yet (open or acknowledged), by model and kind.",
        labels=["model", "kind", "state"],
    )
    # NOT state = 'resolved' is the predicate of the one-live-alert-per-kind index: read from it.
    live = Alert.objects.exclude(state=AlertState.RESOLVED).values("model__name", "kind", "state")
    for row in live.annotate(n=Count("id")).order_by():
        alerts.add_metric([row["model__name"], row["kind"], row["state"]], row["n"])
    yield alerts


def job_families(now: datetime) -> Iterator[Metric]:
    jobs = GaugeMetricFamily("driftwatch_retrain_jobs", "Retraining jobs by state.", labels=["state"])
    counts = dict(RetrainJob.objects.values_list("state").annotate(n=Count("id")).order_by())
    for state in JobState.values:
        jobs.add_metric([state], counts.get(state, 0))
    yield jobs
    yield _estimator_error()


def _estimator_error() -> HistogramMetricFamily:
    """One conditional count per bucket: ratio <= b  <=>  estimated <= b * measured."""
    finished = RetrainJob.objects.filter(
        estimated_peak_bytes__isnull=False, measured_peak_bytes__gt=0, finished_at__isnull=False
    )
    buckets = {
        f"le{i}": Count("id", filter=Q(estimated_peak_bytes__lte=_float("measured_peak_bytes") * b))
        for i, b in enumerate(ESTIMATOR_BUCKETS)
    }
    ratio = _float("estimated_peak_bytes") / _float("measured_peak_bytes")
    row = finished.aggregate(n=Count("id"), total=Coalesce(Sum(ratio), 0.0), **buckets)
    family = HistogramMetricFamily(
        "driftwatch_estimator_peak_ratio",
        "Finished retraining jobs by estimated / measured peak memory (1: exact; below 1: under-estimated).",
    )
    pairs = [(str(b), float(row[f"le{i}"])) for i, b in enumerate(ESTIMATOR_BUCKETS)]
    family.add_metric([], [*pairs, ("+Inf", float(row["n"]))], float(row["total"]))
    return family


def _float(field: str) -> Cast:
    """A fresh expression per use (an integer column as a float: no integer division)."""
    return Cast(field, FloatField())


def gpu_families(now: datetime) -> Iterator[Metric]:
    labels = ["device", "host", "index", "name"]
    capacity = GaugeMetricFamily("driftwatch_gpu_capacity_bytes", "Memory of the device.", labels=labels)
    reserved = GaugeMetricFamily(
        "driftwatch_gpu_reserved_bytes",
        "Memory reserved on the device by active retraining jobs.",
        labels=labels,
    )
    free = GaugeMetricFamily(
        "driftwatch_gpu_free_bytes", "Free memory the device's worker last reported.", labels=labels
    )
    live = GaugeMetricFamily(
        "driftwatch_gpu_live", "1 when the device's worker was heard from recently, else 0.", labels=labels
    )
    holding = Q(placements__released_at__isnull=True, placements__job__state__in=ACTIVE_STATES)
    devices = GpuDevice.objects.annotate(held=Coalesce(Sum("placements__reserved_bytes", filter=holding), 0))
    cutoff = now - stale_after()
    for device in devices:
        values = [f"{device.host}:{device.index}", device.host, str(device.index), device.name]
        capacity.add_metric(values, device.total_bytes)
        reserved.add_metric(values, device.held)
        free.add_metric(values, device.free_bytes)
        live.add_metric(values, 1 if device.last_seen >= cutoff else 0)
    yield from (capacity, reserved, free, live)


def outbox_families(now: datetime) -> Iterator[Metric]:
    kept = OutboxMessage.objects.aggregate(n=Count("id"), oldest=Min("created_at"))
    yield GaugeMetricFamily(
        "driftwatch_outbox_messages", "Task messages the broker refused, kept to be re-sent.", value=kept["n"]
    )
    oldest = kept["oldest"]
    yield GaugeMetricFamily(
        "driftwatch_outbox_oldest_age_seconds",
        "Age of the oldest kept message (0 when the outbox is empty).",
        value=(now - oldest).total_seconds() if oldest else 0.0,
    )


def broker_families(now: datetime) -> Iterator[Metric]:
    depth = GaugeMetricFamily(
        "driftwatch_celery_queue_depth", "Messages waiting in the broker, by Celery queue.", labels=["queue"]
    )
    for queue, n in sorted(queue_depths().items()):
        depth.add_metric([queue], n)
    yield depth


Source = Callable[[datetime], Iterator[Metric]]
# (source name, what it reads, the error that means "that service is down").
SOURCES: list[tuple[str, Source, tuple[type[BaseException], ...]]] = [
    ("database", check_families, (DatabaseError,)),
    ("database", alert_families, (DatabaseError,)),
    ("database", job_families, (DatabaseError,)),
    ("database", gpu_families, (DatabaseError,)),
    ("database", outbox_families, (DatabaseError,)),
    ("broker", broker_families, (OSError, ConnectionError)),
]


class DatabaseCollector:
    """The scrape-time families; a source that is down is reported as such, the rest still are."""

    def collect(self) -> Iterator[Metric]:
        from core.unavailable import broker_errors

        now = timezone.now()
        up: dict[str, int] = {}
        seconds: dict[str, float] = {}
        for name, source, errors in SOURCES:
            started = time.perf_counter()
            try:
                families = list(source(now))
            except errors + broker_errors() as exc:
                logger.warning("metrics: %s unavailable for %s (%r)", name, source.__name__, exc)
                up[name] = 0
                continue
            finally:
                seconds[name] = seconds.get(name, 0.0) + time.perf_counter() - started
            up.setdefault(name, 1)
            yield from families
        up_family = GaugeMetricFamily(
            "driftwatch_metrics_source_up", "1 when the scrape could read the source.", labels=["source"]
        )
        took = GaugeMetricFamily(
            "driftwatch_metrics_source_seconds",
            "Time this scrape spent reading the source.",
            labels=["source"],
        )
        for name in sorted(up):
            up_family.add_metric([name], up[name])
            took.add_metric([name], seconds[name])
        yield from (up_family, took)
