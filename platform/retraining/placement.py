"""Placing queued retraining jobs on GPUs: size, best fit, reserve, route (issue 11).

A round (on every job request and on a beat tick) sizes each waiting job once with the memory
estimator (its plan for the largest live device: CUDA semantics, margin included), then places the
queue in order with ``workers.placement.place_round`` (best fit, anti-starvation hold) and sends
each placed job to its device's queue with a *token*: a message whose token is no longer the
placement's (the job was re-placed since) is void. A reservation counts while the job is active,
so it is released however the job ends, including a re-queue by the reaper (which re-requests a
placement). Without any live GPU the job goes to a CPU training worker, which plans against its
own RAM. The worker side: ``placed_plan`` (train the placed plan), ``placement_cap`` (the cap)
and ``placement_guard`` (simulated devices: allocator replay at the reservation; measured peak).
"""

import contextlib
import logging
import math
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from core.enqueue import enqueue
from core.transient import is_transient
from retraining.inputs import champion_predictor, job_recipe, training_data
from retraining.inventory import (
    device_is_live,
    devices_live,
    reserved_bytes,
    running_reserved_bytes,
)
from retraining.joblog import job_log
from retraining.models import ACTIVE_STATES, GpuDevice, GpuPlacement, JobState, RetrainJob
from retraining.selectors import retrain_policy_for
from workers import queues
from workers.placement import DeviceState, JobRequest, place_round
from workers.placement.devices import CUDA_CONTEXT_BYTES
from workers.placement.isolation import SimulatedDeviceGuard, SimulatedOutOfMemory, allocator_budget
from workers.training import engine

logger = logging.getLogger(__name__)


def _margin() -> float | None:
    margin = settings.DRIFTWATCH_RETRAIN_MARGIN
    return None if margin is None else float(margin)


def _max_skips() -> int:
    return int(settings.DRIFTWATCH_GPU_MAX_SKIPS)


# -- requests ------------------------------------------------------------------------------------
def placement_request(job: RetrainJob) -> None:
    """(Re)queue ``job`` for placement: any previous reservation is dropped, a round runs after commit."""
    placement, _ = GpuPlacement.objects.get_or_create(job=job)
    GpuPlacement.objects.filter(job=job).update(
        device=None, on_cpu=False, reserved_bytes=0, placed_at=None, released_at=None
    )
    if devices_live().exists():
        enqueue(queues.RETRAIN_PLACE)
    else:  # no GPU fleet: straight to a CPU training worker, no round needed
        _to_cpu([placement], timezone.now())


# -- the round -------------------------------------------------------------------------------------
def jobs_place(*, now: datetime | None = None) -> int:
    """One placement round; returns how many jobs were sent to a worker."""
    now = now or timezone.now()
    for job in RetrainJob.objects.filter(state=JobState.QUEUED, placement__isnull=True):
        GpuPlacement.objects.get_or_create(job=job)
    _size_unsized(now)
    with transaction.atomic():
        devices = list(GpuDevice.objects.select_for_update().order_by("host", "index"))
        _release_ended(now)
        live = [d for d in devices if device_is_live(d, now=now)]
        _unplace_from_stale([d for d in devices if d not in live])
        waiting = list(
            GpuPlacement.objects.select_for_update(of=("self",))
            .filter(job__state=JobState.QUEUED, device__isnull=True, on_cpu=False)
            .select_related("job")
            .order_by("job__created_at", "job_id")
        )
        if not waiting:
            return 0
        return _place(waiting, live, now) if live else _to_cpu(waiting, now)


def _release_ended(now: datetime) -> None:
    ended = GpuPlacement.objects.filter(device__isnull=False, released_at__isnull=True).exclude(
        job__state__in=ACTIVE_STATES
    )
    ended.update(released_at=now)


def _unplace_from_stale(stale: list[GpuDevice]) -> None:
    """Jobs sent to a device that went silent before a worker took them: place them again."""
    moved = GpuPlacement.objects.filter(job__state=JobState.QUEUED, device__in=stale)
    for placement in moved.select_related("device"):
        job_log(placement.job_id, f"{placement.device} went stale before the job started; re-placing")
    moved.update(device=None, reserved_bytes=0, placed_at=None)


def _device_state(device: GpuDevice) -> DeviceState:
    return DeviceState(
        key=str(device.pk),
        total_bytes=device.total_bytes,
        free_bytes=device.free_bytes,
        reserved_bytes=reserved_bytes(device),
        in_use_by_placed_bytes=0 if device.simulated else running_reserved_bytes(device),
    )


def _place(waiting: list[GpuPlacement], live: list[GpuDevice], now: datetime) -> int:
    by_key = {str(d.pk): d for d in live}
    requests = [
        JobRequest(p.pk, p.need_bytes if p.need_bytes is not None else 1 << 62, p.skips) for p in waiting
    ]
    result = place_round(requests, [_device_state(d) for d in live], max_skips=_max_skips())
    by_pk = {p.pk: p for p in waiting}
    for fit in result.placements:
        placement, device = by_pk[int(str(fit.job_id))], by_key[fit.device_key]
        plan = {**placement.plan, "device": "cpu" if device.simulated else "cuda"}
        GpuPlacement.objects.filter(pk=placement.pk).update(
            device=device, reserved_bytes=fit.reservation_bytes, plan=plan, placed_at=now,
            wait_reason="", wait_detail="", token=placement.token + 1, released_at=None,
        )  # fmt: skip
        # The job shows and trains the plan of the device it was placed on (cpu for a simulated one).
        RetrainJob.objects.filter(pk=placement.job_id).update(plan=plan)
        enqueue(queues.RETRAIN_RUN, args=[placement.job_id, placement.token + 1], queue=device.queue)
        job_log(
            placement.job_id, f"placed on {device} ({device.queue}), reserving {fit.reservation_bytes} bytes"
        )
    for key, reason in result.waiting.items():
        GpuPlacement.objects.filter(pk=int(str(key))).update(
            skips=result.skips.get(key, 0), wait_reason=reason.code, wait_detail=reason.detail[:500]
        )
    return len(result.placements)


def _to_cpu(waiting: list[GpuPlacement], now: datetime) -> int:
    for placement in waiting:
        GpuPlacement.objects.filter(pk=placement.pk).update(
            on_cpu=True, placed_at=now, token=placement.token + 1, wait_reason="", wait_detail=""
        )
        enqueue(queues.RETRAIN_RUN, args=[placement.job_id, placement.token + 1])
        job_log(placement.job_id, "no live GPU: sent to a CPU training worker (sized against its RAM)")
    return len(waiting)


# -- sizing ----------------------------------------------------------------------------------------
def _size_unsized(now: datetime) -> None:
    """Estimate each waiting job once: its plan for the largest live device (CUDA semantics)."""
    largest = max((d.total_bytes for d in devices_live(now=now)), default=0)
    if not largest:
        return  # no GPU: the CPU worker plans against its RAM
    unsized = GpuPlacement.objects.filter(job__state=JobState.QUEUED, need_bytes__isnull=True, on_cpu=False)
    for placement in unsized.select_related("job", "job__model", "job__champion"):
        try:
            need, plan = job_size(placement.job, budget_bytes=largest)
        except Exception as exc:
            if is_transient(exc):
                # A database or broker blip: the job stays queued and unsized; the round fails
                # and its task retries it with backoff (workers.tasks.base).
                logger.warning("retrain job=%s sizing interrupted, retried: %s", placement.job_id, exc)
                raise
            _fail(placement.job, f"{type(exc).__name__}: {exc}")  # bad data or recipe: for good
            continue
        # Compare-and-set: a concurrent round may have sized and placed it meanwhile.
        GpuPlacement.objects.filter(pk=placement.pk, need_bytes__isnull=True).update(
            need_bytes=need, plan=plan
        )


def job_size(job: RetrainJob, *, budget_bytes: int) -> tuple[int, dict[str, Any]]:
    """The job's reservation (estimate / (1 - margin), CUDA context included) and its plan."""
    data = training_data(job.model, retrain_policy_for(job.model), now=timezone.now())
    recipe = job_recipe(job.model, job.champion, champion_predictor(job.champion))
    schema = engine.make_schema(job.model.task, job.model.feature_types, list(job.model.classes))
    prepared = engine.prepare(recipe, schema, data.split.train, data.split.train_labels)
    try:
        plan = engine.plan_training(
            recipe, prepared, budget_bytes=budget_bytes, device="cuda", margin=_margin()
        )
    except engine.PlanDoesNotFit as exc:
        job_log(job.pk, f"does not fit the largest live GPU ({budget_bytes} bytes): {exc}")
        return budget_bytes + 1, {}
    need = math.ceil((plan.estimated_bytes or CUDA_CONTEXT_BYTES) / (1.0 - plan.margin))
    # Stored on the job too: the worker trains this plan (``placed_plan``) and never traces again.
    RetrainJob.objects.filter(pk=job.pk).update(
        plan=plan.to_dict(), estimated_peak_bytes=plan.estimated_bytes
    )
    job_log(
        job.pk, f"sized: batch {plan.batch_size}, estimated {plan.estimated_bytes} bytes, reservation {need}"
    )
    return need, plan.to_dict()


def _fail(job: RetrainJob, error: str) -> None:
    if RetrainJob.objects.filter(pk=job.pk, state=JobState.QUEUED).update(
        state=JobState.FAILED, error=error[:5000], finished_at=timezone.now()
    ):
        job_log(job.pk, f"→ failed while sizing: {error}")


# -- worker side -----------------------------------------------------------------------------------
def placement_is_current(job_id: int, token: int | None) -> bool:
    """False for a message sent before the job was placed again (a stale device, a reaped job)."""
    return token is None or GpuPlacement.objects.filter(job_id=job_id, token=token).exists()


def _device_placement(job_id: int) -> GpuPlacement | None:
    return GpuPlacement.objects.select_related("device").filter(job_id=job_id, device__isnull=False).first()


def placed_plan(job_id: int) -> Any:
    """The plan the job was placed with (an ``engine.TrainingPlan``), or None (CPU: plan locally)."""
    placement = _device_placement(job_id)
    if placement is None or not placement.plan:
        return None
    fields = {k: v for k, v in placement.plan.items() if k in engine.TrainingPlan.__dataclass_fields__}
    # A simulated device's job trains on the CPU; a real one on the worker's (pinned) GPU.
    fields["device"] = "cpu" if placement.device is not None and placement.device.simulated else "cuda"
    plan = engine.TrainingPlan(**fields)
    RetrainJob.objects.filter(pk=job_id).update(
        plan=plan.to_dict(), estimated_peak_bytes=plan.estimated_bytes
    )
    job_log(job_id, f"plan from placement on {placement.device}: batch {plan.batch_size} on {plan.device}")
    return plan


def placement_cap(job_id: int) -> int | None:
    """The allocator's share of the reservation, for the engine's ``memory_cap_bytes``."""
    placement = _device_placement(job_id)
    return allocator_budget(placement.reserved_bytes) if placement is not None else None


@contextlib.contextmanager
def placement_guard(job_id: int, prepared: Any, plan: Any) -> Iterator[None]:
    """Around one training attempt: on a simulated device, replay its allocations at the reservation
    (over it → ``TrainingOutOfMemory`` for that job alone); record the measured peak either way."""
    placement = _device_placement(job_id)
    if placement is None or placement.device is None:
        yield
        return
    if not placement.device.simulated:
        yield
        _record_measured(placement, _cuda_measured())
        return
    guard = SimulatedDeviceGuard(allocator_budget(placement.reserved_bytes))
    try:
        # What a real job first moves to the device; the data stays on the host and each
        # micro-batch is allocated (and replayed) inside the guard as it is moved.
        guard.register_module(prepared.module)
        with guard:
            yield
    except SimulatedOutOfMemory as exc:
        raise engine.TrainingOutOfMemory(plan, str(exc), guard.measured_bytes) from exc
    finally:
        _record_measured(placement, guard.measured_bytes)


def _cuda_measured() -> int:
    import torch  # lazy: only GPU workers get here

    return int(torch.cuda.max_memory_reserved()) + CUDA_CONTEXT_BYTES


def _record_measured(placement: GpuPlacement, measured: int) -> None:
    previous = GpuPlacement.objects.filter(pk=placement.pk).values_list("measured_bytes", flat=True).first()
    GpuPlacement.objects.filter(pk=placement.pk).update(measured_bytes=max(previous or 0, measured))
