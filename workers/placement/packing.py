"""Best-fit placement of queued jobs, in queue order, with a bound on how long a job can starve.

One planning round takes the queue (oldest first) and the live devices, and for each job in turn
picks the device where its reservation fits with the least memory left over (best fit keeps the
large holes for large jobs). A job that fits nowhere stays queued with a reason.

Anti-starvation: a job that was passed over while a job behind it was placed gets one *skip*.
Once it has ``max_skips`` skips, the device closest to fitting it (the least memory missing) is
*held*: no other job is placed there until the starving job is, so the device drains as its
running jobs finish and the starving job gets it. The wait is therefore bounded by ``max_skips``
rounds in which others were placed, plus the longest remaining run among the held device's jobs.
Only the oldest starving job holds a device at a time (queue order among the starving), and a
job larger than any live device is reported ``too_large`` and holds nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field, replace

from workers.placement.devices import DeviceState

DEFAULT_MAX_SKIPS = 3

# Wait reasons (stable codes: the dashboard and the API show them).
NO_LIVE_DEVICE = "no_live_device"
TOO_LARGE = "too_large"
INSUFFICIENT_MEMORY = "insufficient_memory"
HOLDING = "holding_device"
DEVICE_HELD = "device_held"


@dataclass(frozen=True)
class JobRequest:
    """A queued job: ``need_bytes`` is its whole reservation (estimate + margin + CUDA context).

    ``need_for(device)``, when given, sizes the job for one device instead (e.g. the largest batch
    plan that fits that device's available memory); it returns None when nothing fits there.
    """

    id: Hashable
    need_bytes: int
    skips: int = 0
    need_for: Callable[[DeviceState], int | None] | None = field(default=None, compare=False)

    def need_on(self, device: DeviceState) -> int | None:
        return self.need_bytes if self.need_for is None else self.need_for(device)


@dataclass(frozen=True)
class Placement:
    job_id: Hashable
    device_key: str
    reservation_bytes: int
    left_over_bytes: int


@dataclass(frozen=True)
class WaitReason:
    code: str
    detail: str


@dataclass
class RoundResult:
    placements: list[Placement] = field(default_factory=list)
    waiting: dict[Hashable, WaitReason] = field(default_factory=dict)
    skips: dict[Hashable, int] = field(default_factory=dict)  # new skip count of each waiting job
    held_device: str | None = None


def place_round(
    queue: Sequence[JobRequest], devices: Sequence[DeviceState], *, max_skips: int = DEFAULT_MAX_SKIPS
) -> RoundResult:
    """Place what fits of ``queue`` (in order) on the live ``devices``; see the module docstring."""
    state = {d.key: d for d in devices if d.live}
    result = RoundResult()
    order = {job.id: i for i, job in enumerate(queue)}
    for job in queue:
        held = result.held_device
        fit = _best_fit(job, [d for d in state.values() if d.key != held])
        if fit is not None:
            result.placements.append(fit)
            state[fit.device_key] = state[fit.device_key].with_reservation(fit.reservation_bytes)
            continue
        result.waiting[job.id] = _why(job, list(state.values()), held)
        if job.skips >= max_skips and held is None and result.waiting[job.id].code != TOO_LARGE:
            result.held_device = _closest(job, list(state.values()))
            if result.held_device is not None:
                result.waiting[job.id] = WaitReason(
                    HOLDING, f"starving after {job.skips} skips: {result.held_device} takes no new job"
                )
    placed_at = [order[p.job_id] for p in result.placements]
    for job in queue:
        if job.id in result.waiting:
            passed = any(i > order[job.id] for i in placed_at)
            result.skips[job.id] = job.skips + (1 if passed else 0)
    return result


def _best_fit(job: JobRequest, devices: list[DeviceState]) -> Placement | None:
    best: Placement | None = None
    for device in sorted(devices, key=lambda d: d.key):
        need = job.need_on(device)
        if need is None or need > device.available_bytes:
            continue
        left = device.available_bytes - need
        if best is None or left < best.left_over_bytes:
            best = Placement(job.id, device.key, need, left)
    return best


def _capacity(device: DeviceState) -> int:
    return device.total_bytes - device.foreign_bytes


def _closest(job: JobRequest, devices: list[DeviceState]) -> str | None:
    """The device that would fit the job once drained, with the least memory still missing."""
    candidates = []
    for device in devices:
        need = job.need_on(replace(device, reserved_bytes=0))
        if need is not None and need <= _capacity(device):
            candidates.append((need - device.available_bytes, device.key))
    return min(candidates)[1] if candidates else None


def _why(job: JobRequest, devices: list[DeviceState], held: str | None) -> WaitReason:
    if not devices:
        return WaitReason(NO_LIVE_DEVICE, "no GPU worker has reported a device recently")
    if _closest(job, devices) is None:
        biggest = max(_capacity(d) for d in devices)
        return WaitReason(
            TOO_LARGE, f"needs {job.need_bytes} B; the largest live device offers {biggest} B when empty"
        )
    best = max((d.available_bytes for d in devices if d.key != held), default=0)
    detail = f"needs {job.need_bytes} B; the most any device has free is {best} B"
    if held is not None:
        detail += f" ({held} is held for a starving job)"
    return WaitReason(INSUFFICIENT_MEMORY, detail)
