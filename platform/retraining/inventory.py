"""GPU inventory: devices reported by training workers' heartbeats; stale ones are not used.

A GPU worker reports its devices at start and then every ``DRIFTWATCH_GPU_HEARTBEAT_SECONDS``
(``workers.tasks.gpu``); a device not heard from for ``DRIFTWATCH_GPU_STALE_SECONDS`` gets no
new job (its running jobs stop heartbeating too, and the job reaper re-queues them).
"""

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import QuerySet, Sum
from django.utils import timezone

from retraining.models import ACTIVE_STATES, GpuDevice, GpuPlacement, JobState
from workers import queues

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class DeviceReport:
    """One device as a worker sees it (real: torch.cuda.mem_get_info; simulated: its capacity)."""

    index: int
    name: str
    total_bytes: int
    free_bytes: int
    simulated: bool = False
    compute_capability: str = ""


def stale_after() -> timedelta:
    return timedelta(seconds=settings.DRIFTWATCH_GPU_STALE_SECONDS)


def devices_report(*, host: str, devices: list[DeviceReport], now: datetime | None = None) -> list[GpuDevice]:
    """Upsert the reporting worker's devices (one row per host and index) with a fresh last_seen."""
    now = now or timezone.now()
    rows = []
    for report in devices:
        row, _ = GpuDevice.objects.update_or_create(
            host=host,
            index=report.index,
            defaults={
                "name": report.name,
                "simulated": report.simulated,
                "compute_capability": report.compute_capability,
                "total_bytes": report.total_bytes,
                "free_bytes": report.free_bytes,
                "queue": queues.train_queue(host, report.index),
                "last_seen": now,
            },
        )
        rows.append(row)
    logger.debug("gpu heartbeat from %s: %s", host, [d.index for d in devices])
    return rows


def devices_live(*, now: datetime | None = None) -> QuerySet[GpuDevice]:
    now = now or timezone.now()
    return GpuDevice.objects.filter(last_seen__gte=now - stale_after())


def device_is_live(device: GpuDevice, *, now: datetime | None = None) -> bool:
    return device.last_seen >= (now or timezone.now()) - stale_after()


def active_placements(device: GpuDevice) -> QuerySet[GpuPlacement]:
    """Placements that still hold memory: the job is active and the reservation not released."""
    return GpuPlacement.objects.filter(device=device, released_at__isnull=True, job__state__in=ACTIVE_STATES)


def reserved_bytes(device: GpuDevice) -> int:
    return int(active_placements(device).aggregate(total=Sum("reserved_bytes"))["total"] or 0)


def running_reserved_bytes(device: GpuDevice) -> int:
    """Reservations of jobs already running: their memory shows in the device's free figure."""
    running = active_placements(device).exclude(job__state=JobState.QUEUED)
    return int(running.aggregate(total=Sum("reserved_bytes"))["total"] or 0)


# -- reads for the dashboard -----------------------------------------------------------------------
def fleet_overview(*, now: datetime | None = None) -> dict[str, object]:
    """Devices (capacity, free, reserved, their jobs: reserved vs measured) and the waiting queue."""
    now = now or timezone.now()
    devices = []
    for device in GpuDevice.objects.all():
        placements = list(active_placements(device).select_related("job", "job__model"))
        reserved = sum(p.reserved_bytes for p in placements)
        devices.append(
            {
                "device": device,
                "live": device_is_live(device, now=now),
                "reserved_bytes": reserved,
                "unreserved_bytes": device.total_bytes - reserved,
                "placements": placements,
            }
        )
    waiting = (
        GpuPlacement.objects.filter(job__state=JobState.QUEUED, device__isnull=True, on_cpu=False)
        .select_related("job", "job__model")
        .order_by("job__created_at", "job_id")
    )
    recent = (
        GpuPlacement.objects.filter(device__isnull=False, released_at__isnull=False)
        .select_related("job", "job__model", "device")
        .order_by("-released_at")[:20]
    )
    return {"devices": devices, "waiting": list(waiting), "recent": list(recent)}
