"""Retraining jobs (a state machine moved by compare-and-set) and each model's retrain policy."""

from typing import Any, TypedDict

from django.conf import settings
from django.db import models
from django.db.models import Q

from monitoring.models import Alert
from registry.models import ModelVersion, ReferenceDataset, RegisteredModel


class JobState(models.TextChoices):
    QUEUED = "queued"
    PLANNED = "planned"
    RUNNING = "running"
    EVALUATING = "evaluating"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


ACTIVE_STATES = (JobState.QUEUED, JobState.PLANNED, JobState.RUNNING, JobState.EVALUATING)
WORKING_STATES = (JobState.PLANNED, JobState.RUNNING, JobState.EVALUATING)  # a worker holds it


class JobProgress(TypedDict, total=False):
    """``RetrainJob.progress``: written by the training worker after each epoch."""

    epoch: int  # epochs done
    epochs: int  # the recipe's budget (early stopping may end the run sooner)
    step: int
    loss: float | None  # mean training loss of the last epoch
    val_loss: float | None  # loss on the time-ordered validation slice (early stopping's metric)
    history: list[list[float | None]]  # [epoch, loss, val_loss] per epoch
    steps_per_epoch: int
    steps_per_second: float | None  # this attempt's pace
    eta_seconds: float | None  # at that pace, if every remaining epoch runs
    peaks: list[list[int | None]]  # [epoch, estimated bytes, measured peak so far] per epoch


class Trigger(models.TextChoices):
    ALERT = "alert"
    ADMIN = "admin"
    API = "api"
    SCHEDULE = "schedule"


class Decision(models.TextChoices):
    NONE = "", "—"
    AWAITING_APPROVAL = "awaiting_approval"
    PROMOTED = "promoted"
    REJECTED = "rejected"
    GATE_FAILED = "gate_failed"
    ROLLED_BACK = "rolled_back"


class Promotion(models.TextChoices):
    AUTO = "auto", "auto: promote when the gate passes"
    MANUAL = "manual", "manual: wait for approve/reject"


class RetrainPolicy(models.Model):
    """How a model is retrained and promoted (``auto_retrain`` itself is on the monitoring policy)."""

    model = models.OneToOneField(RegisteredModel, on_delete=models.CASCADE, related_name="retrain_policy")
    promotion = models.CharField(max_length=10, choices=Promotion.choices, default=Promotion.AUTO)
    min_improvement = models.FloatField(
        default=0.01, help_text="accuracy points (classification) or relative MAE reduction (regression)"
    )
    alpha = models.FloatField(default=0.05, help_text="significance level of the paired test")
    cooldown_minutes = models.PositiveIntegerField(
        default=60, help_text="no alert-triggered job this soon after the last one"
    )
    training_window_hours = models.PositiveIntegerField(
        default=24 * 7, help_text="labelled samples this recent are training data"
    )
    max_training_samples = models.PositiveIntegerField(default=50_000, help_text="the most recent ones")
    min_training_samples = models.PositiveIntegerField(default=200)
    holdout_fraction = models.FloatField(default=0.2, help_text="the most recent labelled slice")
    include_reference = models.BooleanField(default=False, help_text="also train on the active reference")
    max_attempts = models.PositiveIntegerField(default=3, help_text="re-queues after a worker died")

    class Meta:
        verbose_name_plural = "retrain policies"

    def __str__(self) -> str:
        return f"retrain policy of {self.model}"


def holdout_path(instance: "RetrainJob", filename: str) -> str:
    return f"retrain/{instance.model.name}/job-{instance.pk}/{filename}"


class RetrainJob(models.Model):
    model = models.ForeignKey(RegisteredModel, on_delete=models.CASCADE, related_name="retrain_jobs")
    state = models.CharField(max_length=12, choices=JobState.choices, default=JobState.QUEUED)
    trigger = models.CharField(max_length=10, choices=Trigger.choices)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    alert = models.ForeignKey(
        Alert, null=True, blank=True, on_delete=models.SET_NULL, related_name="retrain_jobs"
    )
    champion = models.ForeignKey(
        ModelVersion, null=True, blank=True, on_delete=models.SET_NULL, related_name="+",
        help_text="the champion when the job was requested (the challenger's parent)",
    )  # fmt: skip
    # The data window used.
    data_start = models.DateTimeField(null=True, blank=True)
    data_end = models.DateTimeField(null=True, blank=True)
    training_samples = models.PositiveIntegerField(null=True, blank=True)
    holdout_samples = models.PositiveIntegerField(null=True, blank=True)
    # The memory plan and what the run measured.
    plan = models.JSONField(default=dict, blank=True, help_text="batch, precision, checkpointing, ...")
    estimated_peak_bytes = models.BigIntegerField(null=True, blank=True)
    measured_peak_bytes = models.BigIntegerField(null=True, blank=True)
    wall_seconds = models.FloatField(null=True, blank=True)
    cpu_seconds = models.FloatField(null=True, blank=True)
    gpu_seconds = models.FloatField(null=True, blank=True)
    energy_joules = models.FloatField(null=True, blank=True, help_text="empty: no counter on the worker")
    oom_events = models.JSONField(default=list, blank=True, help_text="plans that ran out of memory")
    progress = models.JSONField(default=dict, blank=True, help_text="epoch, step, loss, val_loss")
    log = models.TextField(blank=True)
    error = models.TextField(blank=True)
    attempts = models.PositiveIntegerField(default=0)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    cancel_requested = models.BooleanField(default=False)
    # Result, gate and promotion.
    result_version = models.ForeignKey(
        ModelVersion, null=True, blank=True, on_delete=models.SET_NULL, related_name="made_by_jobs"
    )
    holdout = models.FileField(upload_to=holdout_path, blank=True, help_text="scored by the challenger")
    gate = models.JSONField(default=dict, blank=True)
    decision = models.CharField(max_length=20, choices=Decision.choices, default=Decision.NONE, blank=True)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    previous_reference = models.ForeignKey(
        ReferenceDataset, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    promoted_reference = models.ForeignKey(
        ReferenceDataset, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            # At most one live job per model, whatever triggers race (as alerts have).
            models.UniqueConstraint(
                fields=["model"],
                condition=Q(state__in=["queued", "planned", "running", "evaluating"]),
                name="one_active_retrain_job_per_model",
            ),
        ]
        indexes = [models.Index(fields=["state", "heartbeat_at"], name="retrain_state_heartbeat")]

    def __str__(self) -> str:
        return f"retrain #{self.pk} of {self.model} ({self.state})"

    @property
    def is_active(self) -> bool:
        return self.state in ACTIVE_STATES

    def summary(self) -> dict[str, Any]:
        return {
            "id": self.pk,
            "model": self.model.name,
            "state": self.state,
            "trigger": self.trigger,
            "decision": self.decision or None,
        }


# -- GPU fleet (issue 11) ----------------------------------------------------------------------
class GpuDevice(models.Model):
    """A GPU (or simulated GPU) a training worker serves, as its last heartbeat reported it."""

    host = models.CharField(max_length=200)
    index = models.PositiveIntegerField()
    name = models.CharField(max_length=200)
    simulated = models.BooleanField(default=False)
    compute_capability = models.CharField(max_length=10, blank=True)
    total_bytes = models.BigIntegerField()
    free_bytes = models.BigIntegerField()
    queue = models.CharField(max_length=255, help_text="train.<host>.<index>: the worker pinned to it")
    last_seen = models.DateTimeField()

    class Meta:
        ordering = ["host", "index"]
        constraints = [models.UniqueConstraint(fields=["host", "index"], name="one_gpu_row_per_host_index")]

    def __str__(self) -> str:
        return f"{self.host}:{self.index} ({self.name})"


class GpuPlacement(models.Model):
    """Where a job runs and what it reserved there; the reservation counts while the job is active."""

    job = models.OneToOneField(RetrainJob, on_delete=models.CASCADE, related_name="placement")
    device = models.ForeignKey(
        GpuDevice, null=True, blank=True, on_delete=models.SET_NULL, related_name="placements"
    )
    on_cpu = models.BooleanField(default=False, help_text="no live GPU: sent to a CPU training worker")
    need_bytes = models.BigIntegerField(null=True, blank=True, help_text="estimate + margin + CUDA context")
    reserved_bytes = models.BigIntegerField(default=0)
    measured_bytes = models.BigIntegerField(null=True, blank=True, help_text="peak reserved + CUDA context")
    plan = models.JSONField(default=dict, blank=True)
    skips = models.PositiveIntegerField(default=0, help_text="rounds in which a later job was placed first")
    wait_reason = models.CharField(max_length=40, blank=True)
    wait_detail = models.CharField(max_length=500, blank=True)
    token = models.PositiveIntegerField(
        default=0, help_text="bumped at each placement; older messages are void"
    )
    placed_at = models.DateTimeField(null=True, blank=True)
    released_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"placement of job #{self.job_id} on {self.device or ('cpu' if self.on_cpu else '—')}"
