"""The run command's periodic status line: what the platform has done so far, from the database."""

from dataclasses import dataclass
from datetime import datetime

from django.db import connection

from monitoring.models import Alert, AlertState, CheckState, GroundTruth, PredictionSample, QualityCheck
from retraining.models import ACTIVE_STATES, JobState, RetrainJob


@dataclass(frozen=True)
class PlatformStatus:
    samples: int
    labels: int
    checks_done: int
    checks_failed: int
    alerts_live: int
    jobs_active: int
    jobs_succeeded: int


def platform_status() -> PlatformStatus:
    """Counts over every model; the connection is closed after, so SQLite is not held open."""
    try:
        return PlatformStatus(
            samples=PredictionSample.objects.count(),
            labels=GroundTruth.objects.count(),
            checks_done=QualityCheck.objects.filter(state=CheckState.DONE).count(),
            checks_failed=QualityCheck.objects.filter(state=CheckState.FAILED).count(),
            alerts_live=Alert.objects.exclude(state=AlertState.RESOLVED).count(),
            jobs_active=RetrainJob.objects.filter(state__in=ACTIVE_STATES).count(),
            jobs_succeeded=RetrainJob.objects.filter(state=JobState.SUCCEEDED).count(),
        )
    finally:
        connection.close()


def status_line(at: datetime, now: PlatformStatus, before: PlatformStatus | None) -> str:
    """One line: `12:03:30  samples 4,200 (+1,200) · labels 4,000 · checks 6 done · …`."""
    new = f" (+{now.samples - before.samples:,})" if before is not None else ""
    failed = f", {now.checks_failed:,} failed" if now.checks_failed else ""
    return (
        f"{at:%H:%M:%S}  samples {now.samples:,}{new} · labels {now.labels:,} · "
        f"checks {now.checks_done:,} done{failed} · alerts {now.alerts_live:,} open · "
        f"retrain jobs {now.jobs_active:,} active, {now.jobs_succeeded:,} succeeded"
    )
