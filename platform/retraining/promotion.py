"""After the gate: auto-promote, wait for approval, reject, promote, roll back.

Promotion makes the challenger champion (the old one is retired), and switches the drift
reference to the challenger's holdout scored by the challenger, so drift, the calibrated
estimate and the baseline metric describe the model now serving. The previous champion and its
reference stay on the job for a one-click rollback. Lineage: alert → job → version (parent = the
previous champion, source = the job) → promotion (decision, decided_by, decided_at).
"""

import logging
import uuid
from typing import Any

from django.core.files.base import ContentFile
from django.db import transaction
from django.utils import timezone

from core.audit import audit_record
from core.errors import Conflict
from registry.models import ModelVersion, ReferenceDataset, RegisteredModel, VersionStatus
from registry.reference import frame_to_parquet
from registry.services import version_promote
from retraining.inputs import holdout_frame
from retraining.joblog import job_log
from retraining.models import Decision, JobState, Promotion, RetrainJob, RetrainPolicy
from retraining.webhooks import webhook_fire
from workers.training.gate import GateResult

logger = logging.getLogger(__name__)


def _decided(decision: str, user: Any) -> dict[str, Any]:
    """The fields a decision sets; an automatic one (no user) has no decider."""
    return {
        "decision": decision,
        "decided_by": user if getattr(user, "pk", None) else None,
        "decided_at": timezone.now(),
    }


def _audit(action: str, job: RetrainJob, user: Any) -> None:
    """Inside the transaction that makes the change; automatic decisions name the process."""
    actor = user if getattr(user, "pk", None) else "retraining (policy)"
    details = {"job": job.pk, "model": job.model.name, "version": job.result_version_id}
    audit_record(actor=actor, action=action, target=job, details=details)


def job_decide(*, job: RetrainJob, policy: RetrainPolicy, verdict: GateResult) -> RetrainJob:
    """Right after evaluation: promote (auto, gate passed), reject (auto, failed) or wait (manual)."""
    if policy.promotion == Promotion.MANUAL:
        RetrainJob.objects.filter(pk=job.pk).update(decision=Decision.AWAITING_APPROVAL)
        job_log(job.pk, "awaiting approval")
        return job
    if verdict.passed:
        return job_promote(job=job, user=None)
    _reject(job, None, Decision.GATE_FAILED)
    return job


def job_approve(*, job: RetrainJob, user: Any) -> RetrainJob:
    if job.decision != Decision.AWAITING_APPROVAL:
        raise Conflict(f"job #{job.pk} is not awaiting approval (decision: {job.decision or 'none'})")
    return job_promote(job=job, user=user)


def job_reject(*, job: RetrainJob, user: Any) -> RetrainJob:
    if not _reject(job, user, Decision.REJECTED):
        raise Conflict(f"job #{job.pk} is not awaiting approval (decision: {job.decision or 'none'})")
    job.refresh_from_db()
    return job


def _reject(job: RetrainJob, user: Any, decision: str) -> bool:
    with transaction.atomic():
        moved = RetrainJob.objects.filter(
            pk=job.pk, state=JobState.SUCCEEDED, decision__in=[Decision.NONE, Decision.AWAITING_APPROVAL]
        ).update(**_decided(decision, user))
        if moved and job.result_version_id:
            ModelVersion.objects.filter(pk=job.result_version_id, status=VersionStatus.CANDIDATE).update(
                status=VersionStatus.REJECTED
            )
        if moved:
            _audit(f"retrain.{decision}", job, user)
    if moved:
        job_log(job.pk, f"challenger {decision}")
    return bool(moved)


def job_promote(*, job: RetrainJob, user: Any) -> RetrainJob:
    """Champion ← the job's challenger; reference ← its holdout scored by it. Claimed by CAS."""
    with transaction.atomic():
        _lock_model(job)
        claimed = RetrainJob.objects.filter(
            pk=job.pk, state=JobState.SUCCEEDED, decision__in=[Decision.NONE, Decision.AWAITING_APPROVAL]
        ).update(**_decided(Decision.PROMOTED, user))
        if not claimed:
            raise Conflict(f"job #{job.pk} cannot be promoted now")
        job = RetrainJob.objects.select_related("model", "result_version").get(pk=job.pk)
        if job.result_version is None:
            raise Conflict(f"job #{job.pk} has no challenger")
        previous = ReferenceDataset.objects.filter(model=job.model, is_active=True).first()
        version_promote(version=job.result_version)
        reference = _reference_from_holdout(job)
        RetrainJob.objects.filter(pk=job.pk).update(previous_reference=previous, promoted_reference=reference)
        webhook_fire(job=job, event="champion.promoted")
        _audit("retrain.promote", job, user)
    job_log(job.pk, f"promoted v{job.result_version.version} to champion; reference #{reference.pk}")
    job.refresh_from_db()
    return job


def _lock_model(job: RetrainJob) -> None:
    """Promotions and rollbacks of one model run one at a time: each reads the champion and the
    active reference, then changes both, and an interleaving would restore the wrong pair."""
    RegisteredModel.objects.select_for_update().filter(pk=job.model_id).first()


def _reference_from_holdout(job: RetrainJob) -> ReferenceDataset:
    frame = holdout_frame(job)
    ReferenceDataset.objects.filter(model=job.model, is_active=True).update(is_active=False)
    reference = ReferenceDataset(
        model=job.model,
        version=job.result_version,
        rows=len(frame),
        columns=list(frame.columns),
        source=f"holdout of retrain job #{job.pk}, scored by v{job.result_version.version if job.result_version else '?'}",
    )
    reference.file.save(f"{uuid.uuid4().hex}.parquet", ContentFile(frame_to_parquet(frame)), save=False)
    reference.save()
    return reference


def job_rollback(*, job: RetrainJob, user: Any) -> RetrainJob:
    """The previous champion and exactly the reference state before the promotion come back (no
    active reference if there was none); the challenger is retired."""
    with transaction.atomic():
        _lock_model(job)
        job = RetrainJob.objects.select_related("model", "champion", "result_version").get(pk=job.pk)
        current = ModelVersion.objects.filter(model=job.model, status=VersionStatus.CHAMPION).first()
        if job.decision != Decision.PROMOTED or current is None or current.pk != job.result_version_id:
            raise Conflict(f"job #{job.pk}'s challenger is not the serving champion: nothing to roll back")
        if job.champion is None:
            raise Conflict(f"job #{job.pk} had no previous champion to roll back to")
        claimed = RetrainJob.objects.filter(pk=job.pk, decision=Decision.PROMOTED).update(
            **_decided(Decision.ROLLED_BACK, user)
        )
        if not claimed:
            raise Conflict(f"job #{job.pk} was rolled back already")
        version_promote(version=job.champion)
        ReferenceDataset.objects.filter(model=job.model, is_active=True).update(is_active=False)
        if job.previous_reference_id:
            ReferenceDataset.objects.filter(pk=job.previous_reference_id).update(is_active=True)
        webhook_fire(job=job, event="champion.rolled_back")
        _audit("retrain.rollback", job, user)
    job_log(job.pk, f"rolled back to v{job.champion.version}")
    job.refresh_from_db()
    return job
