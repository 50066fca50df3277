"""Reads for retraining: jobs as the API and the dashboard show them."""

import re
from dataclasses import dataclass
from typing import Any

from django.db.models import Count, QuerySet
from django.http import Http404
from rest_framework.exceptions import NotFound

from registry.models import ModelVersion, RegisteredModel, VersionStatus
from retraining.models import ACTIVE_STATES, JobState, RetrainJob, RetrainPolicy

LOG_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) (.*)$")


def retrain_policy_for(model: RegisteredModel) -> RetrainPolicy:
    """The model's retrain policy; the defaults are stored the first time it is asked for."""
    policy, _ = RetrainPolicy.objects.get_or_create(model=model)
    return policy


def job_get(*, job_id: int) -> RetrainJob:
    job = RetrainJob.objects.select_related("model", "result_version", "champion").filter(pk=job_id).first()
    if job is None:
        raise NotFound(f"no retrain job #{job_id}")
    return job


def jobs_for_model(*, model: RegisteredModel, limit: int = 50) -> QuerySet[RetrainJob]:
    jobs = RetrainJob.objects.filter(model=model)
    return jobs.select_related("model", "result_version", "champion", "placement__device")[:limit]


def champion_get(*, model: RegisteredModel) -> ModelVersion | None:
    return ModelVersion.objects.filter(model=model, status=VersionStatus.CHAMPION).first()


def job_detail(*, job: RetrainJob) -> dict[str, Any]:
    return {
        "id": job.pk,
        "model": job.model.name,
        "state": job.state,
        "trigger": job.trigger,
        "requested_by": job.requested_by.get_username() if job.requested_by else None,
        "alert": job.alert_id,
        "champion": job.champion.version if job.champion else None,
        "data_start": job.data_start,
        "data_end": job.data_end,
        "training_samples": job.training_samples,
        "holdout_samples": job.holdout_samples,
        "plan": job.plan,
        "estimated_peak_bytes": job.estimated_peak_bytes,
        "measured_peak_bytes": job.measured_peak_bytes,
        "wall_seconds": job.wall_seconds,
        "cpu_seconds": job.cpu_seconds,
        "gpu_seconds": job.gpu_seconds,
        "energy_joules": job.energy_joules,
        "oom_events": job.oom_events,
        "progress": job.progress,
        "attempts": job.attempts,
        "heartbeat_at": job.heartbeat_at,
        "cancel_requested": job.cancel_requested,
        "result_version": job.result_version.version if job.result_version else None,
        "gate": job.gate,
        "decision": job.decision or None,
        "decided_at": job.decided_at,
        "error": job.error,
        "log": job.log,
        "created_at": job.created_at,
        "started_at": job.started_at,
        "finished_at": job.finished_at,
    }


def challenger_get(*, model: RegisteredModel, champion: ModelVersion | None) -> ModelVersion | None:
    """The newest candidate newer than the champion: a retrained version awaiting approval, or an
    upload not promoted yet. A candidate older than the champion challenges nothing."""
    candidates = ModelVersion.objects.filter(model=model, status=VersionStatus.CANDIDATE)
    if champion is not None:
        candidates = candidates.filter(version__gt=champion.version)
    return candidates.select_related("parent").order_by("-version").first()


def job_that_made(*, version: ModelVersion) -> RetrainJob | None:
    """The retrain job whose result the version is (its lineage and gate); None for an upload."""
    jobs = RetrainJob.objects.filter(result_version=version).select_related("champion", "alert", "decided_by")
    return jobs.order_by("-created_at").first()


def jobs_list(*, state: str | None = None, limit: int = 100) -> QuerySet[RetrainJob]:
    """Jobs of every model, newest first; ``state="active"`` for the live ones."""
    jobs = RetrainJob.objects.select_related("model", "result_version", "placement__device").defer("log")
    if state == "active":
        jobs = jobs.filter(state__in=ACTIVE_STATES)
    elif state in JobState.values:
        jobs = jobs.filter(state=state)
    return jobs[:limit]


def job_counts() -> dict[str, int]:
    """Jobs per state (every state present, zero when none), and "active"."""
    counts = dict.fromkeys(JobState.values, 0)
    for row in RetrainJob.objects.values("state").annotate(n=Count("pk")):
        counts[row["state"]] = row["n"]
    counts["active"] = sum(counts[s] for s in ACTIVE_STATES)
    return counts


def job_page_get(*, job_id: int) -> RetrainJob:
    job = (
        RetrainJob.objects.select_related(
            "model", "result_version", "champion", "requested_by", "alert", "placement__device"
        )
        .filter(pk=job_id)
        .first()
    )
    if job is None:
        raise Http404(f"no retrain job #{job_id}")
    return job


@dataclass(frozen=True)
class LogEntry:
    at: str  # "YYYY-mm-dd HH:MM:SS", as job_log wrote it (UTC)
    message: str  # may span lines (a traceback)


def job_log_entries(*, job: RetrainJob) -> list[LogEntry]:
    """``job_log`` lines, one entry per step; lines without a timestamp continue the entry above."""
    entries: list[LogEntry] = []
    for line in job.log.splitlines():
        match = LOG_LINE.match(line)
        if match:
            entries.append(LogEntry(match[1], match[2]))
        elif entries:
            entries[-1] = LogEntry(entries[-1].at, entries[-1].message + "\n" + line)
        elif line.strip():
            entries.append(LogEntry("", line))
    return entries
