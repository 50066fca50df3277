"""Running one job: queued → planned → running → evaluating → succeeded / failed / cancelled.

Each move is a compare-and-set on the job row, so a redelivered or re-queued task that finds the
job already taken does nothing. Training data = labelled samples of the policy's training window
(minus windows a check marked unusable), optionally the active reference; the holdout is the
most recent labelled slice. The engine (``workers.training``) does the torch work.
"""

import gc
import logging
import math
import sys
import time
import traceback
from typing import Any

import pandas as pd
from django.conf import settings
from django.core.files.base import ContentFile
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from core.transient import TRANSIENT_ERRORS, is_transient
from registry.models import ModelVersion
from registry.reference import LABEL, PREDICTION, PROBA_PREFIX, frame_to_parquet
from registry.services import version_create
from retraining.checkpoints import JobCheckpoints
from retraining.inputs import TrainingData, champion_predictor, job_recipe, training_data
from retraining.joblog import job_log
from retraining.models import WORKING_STATES, JobProgress, JobState, RetrainJob, RetrainPolicy
from retraining.placement import placed_plan, placement_cap, placement_guard, placement_request
from retraining.promotion import job_decide
from retraining.selectors import retrain_policy_for
from workers.training import engine
from workers.training.artifacts import ArtifactError, Predictor, bundle_to_bytes
from workers.training.gate import GateResult, gate
from workers.training.measure import available_memory_bytes
from workers.training.modules import WeightsDoNotFit
from workers.training.recipes import Recipe

logger = logging.getLogger(__name__)

OOM_REPLAN_FACTOR = 0.5  # a retry after an OOM plans against half the failed plan's estimate
PROGRESS_SECONDS = 1.0  # the least time between two progress writes of a running job


def _move(job: RetrainJob, old: str, new: str, **fields: Any) -> bool:
    now = timezone.now()
    moved = RetrainJob.objects.filter(pk=job.pk, state=old).update(state=new, heartbeat_at=now, **fields)
    if moved:
        job.state = new
        job_log(job.pk, f"{old} → {new}")
    return bool(moved)


def job_run(*, job_id: int) -> str:
    """The task's one service call. Returns the job's state afterwards."""
    job = RetrainJob.objects.select_related("model", "champion").filter(pk=job_id).first()
    if job is None:
        logger.warning("retrain job=%s skipped: it no longer exists", job_id)
        return "missing"
    if not _move(
        job, JobState.QUEUED, JobState.PLANNED, attempts=F("attempts") + 1, started_at=timezone.now()
    ):
        logger.info(
            "retrain job=%s model=%s not claimed: it is %s (another worker got there first)",
            job_id,
            job.model_id,
            job.state,
        )
        return job.state
    try:
        _run(job)
    except engine.TrainingCancelled as exc:
        _finish(job, JobState.CANCELLED, str(exc))
    except Exception as exc:
        if is_transient(exc) and _requeue_after_blip(job, exc):
            return JobState.QUEUED
        logger.exception("retrain job=%s model=%s failed", job.pk, job.model_id)
        job_log(job.pk, "failed:\n" + traceback.format_exc())
        _finish(job, JobState.FAILED, f"{type(exc).__name__}: {exc}")
    if not RetrainJob.objects.filter(pk=job.pk).exists():
        logger.warning("retrain job=%s stopped: the job was deleted (with its model)", job.pk)
        _release_device_memory()
        return "missing"
    job.refresh_from_db()
    return job.state


def _release_device_memory() -> None:
    """A deleted job's reservation row is gone: give its cached device memory back as well."""
    torch = sys.modules.get("torch")  # only if this process trained (it imported torch)
    if torch is not None and torch.cuda.is_available():
        gc.collect()
        torch.cuda.empty_cache()


def _requeue_after_blip(job: RetrainJob, exc: Exception) -> bool:
    """A database or broker blip is not the job's fault: back to queued and placed again, within
    the policy's attempts (as the reaper counts them). If even that fails, the job keeps its
    stale heartbeat and the reaper re-queues it. False: the job has used its attempts."""
    try:
        with transaction.atomic():
            attempts = RetrainJob.objects.filter(pk=job.pk).values_list("attempts", flat=True).first() or 0
            if attempts >= retrain_policy_for(job.model).max_attempts:
                return False
            if not RetrainJob.objects.filter(pk=job.pk, state__in=WORKING_STATES).update(
                state=JobState.QUEUED, progress={}
            ):
                return False
            job_log(job.pk, f"transient {type(exc).__name__}: {exc}; re-queued")
            placement_request(job)
    except TRANSIENT_ERRORS:
        logger.warning("retrain job=%s: re-queue failed too; the reaper will", job.pk, exc_info=True)
    return True


def _finish(job: RetrainJob, state: str, error: str = "") -> None:
    RetrainJob.objects.filter(
        pk=job.pk, state__in=[JobState.PLANNED, JobState.RUNNING, JobState.EVALUATING]
    ).update(state=state, error=error[:5000], finished_at=timezone.now())
    job_log(job.pk, f"→ {state}" + (f": {error}" if error else ""))
    JobCheckpoints(job).delete()  # an ended job is never resumed


def _run(job: RetrainJob) -> None:
    policy = retrain_policy_for(job.model)
    checkpoints = JobCheckpoints(job)
    # A re-queued attempt reads the first attempt's window: the same rows, so it can resume.
    data = training_data(job.model, policy, now=checkpoints.data_now(timezone.now()))
    champion = champion_predictor(job.champion)
    recipe = job_recipe(job.model, job.champion, champion)
    schema = engine.make_schema(job.model.task, job.model.feature_types, list(job.model.classes))
    RetrainJob.objects.filter(pk=job.pk).update(
        data_start=data.start,
        data_end=data.end,
        training_samples=len(data.split.train),
        holdout_samples=len(data.split.holdout),
    )
    job_log(job.pk, f"data: {len(data.split.train)} training rows, {len(data.split.holdout)} holdout rows")
    prepared = _prepare(job, recipe, schema, data, champion)
    plan = _job_plan(job, recipe, prepared)
    if not _move(job, JobState.PLANNED, JobState.RUNNING):
        raise engine.TrainingCancelled("the job left 'planned' (cancelled or reaped)")
    result = _train(job, recipe, prepared, plan, checkpoints)
    if _cancel_requested(job.pk):  # asked during the last epoch: no challenger is made
        raise engine.TrainingCancelled("cancelled after training, before evaluation")
    if not _move(job, JobState.RUNNING, JobState.EVALUATING):
        raise engine.TrainingCancelled("the job left 'running' (cancelled or reaped)")
    version, verdict = _evaluate(job, policy, data, result, champion)
    # One transaction: nobody sees "succeeded" without its decision (promoted, waiting, rejected).
    with transaction.atomic():
        RetrainJob.objects.filter(pk=job.pk, state=JobState.EVALUATING).update(
            state=JobState.SUCCEEDED,
            finished_at=timezone.now(),
            result_version=version,
            gate=verdict.to_dict(),
        )
        job_log(
            job.pk,
            f"→ succeeded: challenger v{version.version}: gate {'passed' if verdict.passed else 'failed'}: "
            f"{verdict.reason}",
        )
        job_decide(job=RetrainJob.objects.get(pk=job.pk), policy=policy, verdict=verdict)
    checkpoints.delete()


def _prepare(
    job: RetrainJob, recipe: Recipe, schema: dict[str, Any], data: TrainingData, champion: Predictor | None
) -> engine.Prepared:
    """The recipe's module, fine-tuned from the champion's weights when the recipe says so (the
    default for deep recipes); weights that no longer fit (the features changed) start afresh."""
    rows, labels = data.split.train, data.split.train_labels
    if champion is not None and recipe.starts_from_champion:
        try:
            prepared = engine.prepare(recipe, schema, rows, labels, start_from=champion.bundle)
        except (WeightsDoNotFit, ArtifactError, KeyError, ValueError) as exc:
            job_log(job.pk, f"fine-tuning impossible ({exc}); training from fresh weights")
        else:
            version = job.champion.version if job.champion is not None else "?"
            job_log(job.pk, f"fine-tuning from the champion v{version}'s weights")
            return prepared
    return engine.prepare(recipe, schema, rows, labels)


def _device() -> str:
    import torch  # lazy: the worker process imports torch only when it trains

    return "cuda" if torch.cuda.is_available() else "cpu"


def _budget(device: str) -> int:

    configured = settings.DRIFTWATCH_RETRAIN_BUDGET_BYTES
    return int(configured) if configured else available_memory_bytes(device)


def _margin() -> float | None:
    """The operator's margin, or None: the planner's, measured per kind of layer."""
    margin = settings.DRIFTWATCH_RETRAIN_MARGIN
    return None if margin is None else float(margin)


def _job_plan(job: RetrainJob, recipe: Recipe, prepared: engine.Prepared) -> engine.TrainingPlan:
    """The job is sized once: the plan it was placed with (a GPU, real or simulated), else the
    plan an earlier attempt stored for this kind of device while it still fits, else a trace."""
    placed = placed_plan(job.pk)
    if placed is not None:
        return placed
    device = _device()
    budget = _budget(device)
    return _stored_plan(job, device, budget) or _plan(job, recipe, prepared, budget)


def _stored_plan(job: RetrainJob, device: str, budget: int) -> engine.TrainingPlan | None:
    fields = {k: v for k, v in (job.plan or {}).items() if k in engine.TrainingPlan.__dataclass_fields__}
    if not fields.get("batch_size") or fields.get("device") != device:
        return None  # never planned, or planned for another kind of device
    plan = engine.TrainingPlan(**fields)
    margin = _margin()
    if (plan.estimated_bytes or 0) > budget * (1.0 - (plan.margin if margin is None else margin)):
        return None  # this worker has less memory than the one it was planned on
    job_log(job.pk, f"plan kept from an earlier attempt: batch {plan.batch_size} on {plan.device}")
    return plan


def _plan(job: RetrainJob, recipe: Recipe, prepared: engine.Prepared, budget: int) -> engine.TrainingPlan:
    plan = engine.plan_training(
        recipe,
        prepared,
        budget_bytes=budget,
        device=_device(),
        margin=_margin(),
        saves_checkpoints=recipe.is_deep,
    )
    RetrainJob.objects.filter(pk=job.pk).update(
        plan=plan.to_dict(), estimated_peak_bytes=plan.estimated_bytes
    )
    job_log(
        job.pk,
        f"plan: batch {plan.batch_size} × {plan.accumulation_steps} ({plan.precision}, checkpointing "
        f"{plan.checkpointing}) on {plan.device}, estimated peak {plan.estimated_bytes} bytes of {budget}",
    )
    return plan


def _train(
    job: RetrainJob,
    recipe: Recipe,
    prepared: engine.Prepared,
    plan: engine.TrainingPlan,
    checkpoints: JobCheckpoints,
) -> engine.TrainingResult:
    """Train, checkpointing as it goes (a checkpoint of an earlier attempt is resumed); an OOM is
    recorded with its plan, re-planned smaller and retried once."""
    cap = placement_cap(job.pk) or settings.DRIFTWATCH_RETRAIN_MEMORY_CAP_BYTES
    watch = _Watch(job.pk, plan)
    for attempt in range(2):
        try:
            watch.start(recipe.epochs)
            with placement_guard(job.pk, prepared, plan):
                try:
                    result = engine.train(
                        recipe, prepared, plan, should_cancel=watch.should_cancel, on_progress=watch.progress,
                        memory_cap_bytes=int(cap) if cap else None, checkpoints=checkpoints,
                    )  # fmt: skip
                finally:
                    watch.flush()  # the last epochs' progress, however the run ended
            break
        except engine.TrainingOutOfMemory as exc:
            _record_oom(job, exc)
            if attempt == 1:
                raise
            budget = int((exc.plan.estimated_bytes or 0) * OOM_REPLAN_FACTOR)
            job_log(job.pk, f"OOM re-plan: retrying once within {budget} bytes")
            prepared = engine.restart(recipe, prepared)
            plan = _plan(job, recipe, prepared, budget)
            watch.plan = plan
    RetrainJob.objects.filter(pk=job.pk).update(
        measured_peak_bytes=result.measured_peak_bytes,
        wall_seconds=result.wall_seconds,
        cpu_seconds=result.cpu_seconds,
        gpu_seconds=result.gpu_seconds,
        energy_joules=result.energy_joules,
    )
    if result.resumed_at_step is not None:
        job_log(job.pk, f"resumed from the checkpoint at step {result.resumed_at_step}")
    job_log(
        job.pk,
        f"trained {result.epochs_run} epochs ({result.steps} steps, best epoch {result.best_epoch}) in "
        f"{result.wall_seconds:.1f} s; measured peak {result.measured_peak_bytes} bytes",
    )
    return result


def _record_oom(job: RetrainJob, exc: engine.TrainingOutOfMemory) -> None:
    event = {"plan": exc.plan.to_dict(), "detail": exc.detail, "measured_bytes": exc.measured_bytes}
    current = RetrainJob.objects.get(pk=job.pk).oom_events
    RetrainJob.objects.filter(pk=job.pk).update(oom_events=[*current, event])
    job_log(job.pk, f"out of memory: {exc}")


class _Watch:
    """Heartbeat and cancellation, checked at most every HEARTBEAT seconds, and progress (every
    epoch's losses and peaks, for the dashboard's progress bar and loss curve), written at most
    every PROGRESS_SECONDS."""

    def __init__(self, job_id: int, plan: engine.TrainingPlan) -> None:
        self.job_id = job_id
        self.plan = plan
        self.peaks: list[list[int | None]] = []
        self.every = float(settings.DRIFTWATCH_RETRAIN_HEARTBEAT_SECONDS)
        # -inf, not 0: time.monotonic() counts from boot, so on a machine up for less than one
        # interval a 0 held back the first heartbeat and the first progress write.
        self.last = -math.inf
        self.epochs = 0
        self.history: list[list[float | None]] = []
        self.latest: engine.Progress | None = None
        self.written = -math.inf

    def start(self, epochs: int) -> None:
        """Before an attempt (an OOM retry starts over): epoch 0 of ``epochs``."""
        self.epochs, self.history, self.peaks = epochs, [], []
        progress: JobProgress = {"epoch": 0, "epochs": epochs, "step": 0, "history": []}
        RetrainJob.objects.filter(pk=self.job_id).update(heartbeat_at=timezone.now(), progress=progress)

    def should_cancel(self) -> bool:
        if time.monotonic() - self.last < self.every:
            return False
        self.last = time.monotonic()
        if not RetrainJob.objects.filter(pk=self.job_id).update(heartbeat_at=timezone.now()):
            return True  # the job was deleted (its model too): stop, nothing may use its device now
        return bool(RetrainJob.objects.filter(pk=self.job_id, cancel_requested=True).exists())

    def progress(self, p: engine.Progress) -> None:
        """Recorded every epoch, written at most every PROGRESS_SECONDS (and at the end: ``flush``):
        a run of thousands of millisecond epochs would otherwise rewrite its growing history each time."""
        self.history.append([p.epoch, _finite(p.loss), _finite(p.val_loss)])
        self.peaks.append([p.epoch, self.plan.estimated_bytes, p.measured_peak_bytes])
        self.latest = p
        if time.monotonic() - self.written >= PROGRESS_SECONDS:
            self.flush()

    def flush(self) -> None:
        p, self.latest = self.latest, None
        if p is None:
            return
        progress: JobProgress = {
            "epoch": p.epoch,
            "epochs": p.epochs or self.epochs,
            "step": p.step,
            "loss": _finite(p.loss),
            "val_loss": _finite(p.val_loss),
            "history": list(self.history),
            "steps_per_epoch": p.steps_per_epoch,
            "steps_per_second": _finite(p.steps_per_second),
            "eta_seconds": _eta(p, p.epochs or self.epochs),
            "peaks": list(self.peaks),
        }
        RetrainJob.objects.filter(pk=self.job_id).update(heartbeat_at=timezone.now(), progress=progress)
        self.written = time.monotonic()


def _eta(p: engine.Progress, epochs: int) -> float | None:
    """Seconds left at this attempt's pace, if every remaining epoch runs (early stopping may end
    the run sooner)."""
    if not p.steps_per_second or not p.steps_per_epoch:
        return None
    return max(0, epochs * p.steps_per_epoch - p.step) / p.steps_per_second


def _finite(value: float | None) -> float | None:
    """JSON columns (PostgreSQL's jsonb) refuse NaN: a loss without a step is no loss."""
    return value if value is not None and math.isfinite(value) else None


def _cancel_requested(job_id: int) -> bool:
    return RetrainJob.objects.filter(pk=job_id, cancel_requested=True).exists()


def _evaluate(
    job: RetrainJob,
    policy: RetrainPolicy,
    data: TrainingData,
    result: engine.TrainingResult,
    champion: Predictor | None,
) -> tuple[ModelVersion, GateResult]:
    holdout, labels = data.split.holdout, data.split.holdout_labels
    challenger = Predictor(result.bundle)
    predictions, proba = challenger.predict(holdout)
    champion_predictions: list[Any] | None = (
        champion.predict(holdout)[0] if champion is not None else data.logged_predictions
    )
    if champion is None and any(p is None or p != p for p in data.logged_predictions):
        champion_predictions = None  # neither a loadable champion nor its logged predictions
    verdict = gate(
        task=job.model.task,
        labels=labels,
        challenger=predictions,
        champion=champion_predictions,
        min_improvement=policy.min_improvement,
        alpha=policy.alpha,
    )
    version = version_create(
        model=job.model,
        artifact=ContentFile(bundle_to_bytes(result.bundle), name="model.safetensors"),
        metrics={verdict.metric: verdict.challenger, "holdout_samples": len(holdout)},
        config={
            "recipe": result.bundle.recipe.to_dict(),
            "plan": RetrainJob.objects.get(pk=job.pk).plan,
            "job": job.pk,
        },
        parent=job.champion,
        source=f"retrain job #{job.pk}",
        training_data_start=data.start,
        training_data_end=data.end,
        training_samples=len(data.split.train),
    )
    _save_holdout(job, holdout, labels, predictions, proba)
    return version, verdict


def _save_holdout(
    job: RetrainJob, holdout: pd.DataFrame, labels: list[Any], predictions: list[Any], proba: Any
) -> None:
    """The holdout scored by the challenger, in the reference layout: the drift reference if promoted."""
    features = list(job.model.feature_types)
    frame = holdout[features].copy()
    frame[LABEL] = labels
    frame[PREDICTION] = predictions
    if proba is not None:
        for j, cls in enumerate(job.model.classes):
            frame[PROBA_PREFIX + str(cls)] = proba[:, j]
    job.holdout.save(
        "holdout.parquet", ContentFile(frame_to_parquet(frame.reset_index(drop=True))), save=False
    )
    RetrainJob.objects.filter(pk=job.pk).update(holdout=job.holdout.name)
