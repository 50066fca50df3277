"""Retraining jobs as the dashboard draws them: progress bar, plan, placement, memory, duration,
energy, and a small loss curve. Reads come from ``retraining.selectors``; this only presents."""

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.core.exceptions import ObjectDoesNotExist
from django.utils import timezone

from retraining.models import JobState, RetrainJob

ACTIVE_REFRESH_SECONDS = 2  # a page showing a live job refreshes its live parts this often
IDLE_REFRESH_SECONDS = 15  # live.js's default period
CURVE_W, CURVE_H, CURVE_PAD = 480, 150, 28
NOT_MEASURED = "not measured"
NO_ENERGY_COUNTER = "the worker had no energy counter (NVML on a GPU, readable RAPL on a CPU)"


@dataclass(frozen=True)
class JobView:
    job: RetrainJob
    epoch: int
    epochs: int  # 0: the run has not started (or predates the budget being recorded)
    bar_value: int
    loss: float | None
    val_loss: float | None
    stopped_early: bool
    plan: str  # the job's plan, or the placement's while it waits on a device
    placement: str
    estimated_bytes: int | None
    sized_at_placement: bool  # the estimate is the placement round's (no worker re-planned since)
    measured_ratio: float | None  # measured / estimated peak
    duration_seconds: float | None  # started → finished (or now, while it runs)
    energy: str
    energy_missing: bool  # trained, but no counter was readable
    cancellable: bool
    steps_per_second: float | None = None
    eta_seconds: float | None = None  # while it runs, at this attempt's pace
    reasoning: str = ""  # why this plan (the planner's words)
    peaks: tuple[tuple[int, int | None, int | None], ...] = ()  # (epoch, estimated, measured)


def job_view(job: RetrainJob, *, now: datetime | None = None) -> JobView:
    progress: dict[str, Any] = job.progress or {}
    epoch, epochs = int(progress.get("epoch") or 0), int(progress.get("epochs") or 0)
    placed = _placement_plan(job)
    placed_bytes = placed.get("plan", {}).get("estimated_bytes")
    estimated = job.estimated_peak_bytes or placed_bytes
    return JobView(
        job=job,
        epoch=epoch,
        epochs=epochs,
        bar_value=epochs if job.state == JobState.SUCCEEDED else min(epoch, epochs),
        loss=progress.get("loss"),
        val_loss=progress.get("val_loss"),
        stopped_early=job.state == JobState.SUCCEEDED and 0 < epoch < epochs,
        plan=plan_text(job.plan or placed.get("plan", {})),
        placement=placement_text(job),
        estimated_bytes=estimated,
        sized_at_placement=placed_bytes is not None and estimated == placed_bytes,
        measured_ratio=_ratio(job.measured_peak_bytes, estimated),
        duration_seconds=_duration(job, now or timezone.now()),
        energy=energy_text(job),
        energy_missing=job.energy_joules is None and job.wall_seconds is not None,
        cancellable=job.is_active and not job.cancel_requested,
        steps_per_second=progress.get("steps_per_second"),
        eta_seconds=progress.get("eta_seconds") if job.is_active else None,
        reasoning=str((job.plan or {}).get("reasoning") or ""),
        peaks=tuple(tuple(row) for row in progress.get("peaks") or () if len(row) == 3),
    )


def job_views(jobs: Any) -> list[JobView]:
    now = timezone.now()
    return [job_view(job, now=now) for job in jobs]


def refresh_seconds(views: list[JobView]) -> int:
    return ACTIVE_REFRESH_SECONDS if any(v.job.is_active for v in views) else IDLE_REFRESH_SECONDS


def plan_text(plan: dict[str, Any]) -> str:
    """ "batch 128 × 2 · fp16 · checkpointing · cuda", or "" before the job is planned."""
    if not plan or not plan.get("batch_size"):
        return ""
    batch = f"batch {plan['batch_size']}"
    if int(plan.get("accumulation_steps") or 1) > 1:
        batch += f" × {plan['accumulation_steps']}"
    parts = [batch, str(plan.get("precision") or "fp32")]
    if plan.get("checkpointing"):
        parts.append("checkpointing")
    parts.append(str(plan.get("device") or "cpu"))
    return " · ".join(parts)


def _placement_plan(job: RetrainJob) -> dict[str, Any]:
    """{"plan": ...}: what the placement round sized for a job that no worker has planned yet."""
    try:
        return {"plan": job.placement.plan or {}}
    except ObjectDoesNotExist:
        return {}


def placement_text(job: RetrainJob) -> str:
    try:
        placement = job.placement
    except ObjectDoesNotExist:
        return ""
    if placement.device is not None:
        simulated = " (simulated)" if placement.device.simulated else ""
        return f"{placement.device.host}:{placement.device.index} {placement.device.name}{simulated}"
    if placement.on_cpu:
        return "CPU training worker"
    if job.state == JobState.QUEUED:
        return f"waiting for a GPU: {placement.wait_reason or 'not placed yet'}"
    return ""


def energy_text(job: RetrainJob) -> str:
    if job.energy_joules is not None:
        joules = job.energy_joules
        return f"{joules / 1000:.2f} kJ" if joules >= 1000 else f"{joules:.1f} J"
    return NOT_MEASURED if job.wall_seconds is not None else "—"


def _ratio(measured: int | None, estimated: int | None) -> float | None:
    return measured / estimated if measured and estimated else None


def _duration(job: RetrainJob, now: datetime) -> float | None:
    if job.started_at is None:
        return None
    end = job.finished_at or (now if job.is_active else None)
    return (end - job.started_at).total_seconds() if end else None


def loss_curve(progress: dict[str, Any]) -> dict[str, Any] | None:
    """Training and validation loss per epoch as SVG polylines (viewBox units), or None."""
    history = [row for row in progress.get("history") or [] if len(row) == 3]
    values = [v for _, loss, val in history for v in (loss, val) if v is not None]
    if not values:
        return None
    last = max(int(progress.get("epochs") or 0), int(history[-1][0]), 2)
    low, high = min(values), max(values)
    span = (high - low) or abs(high) or 1.0

    def point(epoch: float, value: float) -> str:
        x = CURVE_PAD + (epoch - 1) / (last - 1) * (CURVE_W - 2 * CURVE_PAD)
        y = CURVE_H - CURVE_PAD - (value - low) / span * (CURVE_H - 2 * CURVE_PAD)
        return f"{x:.1f},{y:.1f}"

    return {
        "w": CURVE_W,
        "h": CURVE_H,
        "pad": CURVE_PAD,
        "right": CURVE_W - CURVE_PAD,
        "bottom": CURVE_H - CURVE_PAD,
        "loss": " ".join(point(e, v) for e, v, _ in history if v is not None),
        "val_loss": " ".join(point(e, v) for e, _, v in history if v is not None),
        "low": low,
        "high": high,
        "last_epoch": last,
        "points": len(history),
    }
