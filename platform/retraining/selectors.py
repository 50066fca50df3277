"""Reads for retraining: jobs as the API and the dashboard show them."""

from typing import Any

from django.db.models import QuerySet
from rest_framework.exceptions import NotFound

from registry.models import ModelVersion, RegisteredModel, VersionStatus
from retraining.models import RetrainJob, RetrainPolicy


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
    return RetrainJob.objects.filter(model=model).select_related("model", "result_version", "champion")[
        :limit
    ]


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
