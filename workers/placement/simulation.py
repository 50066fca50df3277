"""Run a queue of jobs on devices in simulated time, placing them with :func:`place_round`.

Used by the tests (each job really trains on the CPU under its simulated device's guard when it
starts) and by ``bench/placement.py`` (each job has a known true peak). Time only advances
between events (an arrival or a job ending); a planning round runs at every event time.

OOM rules: with ``isolation`` (each job capped at its reservation) a job whose real footprint
exceeds its reservation fails alone when it starts. Without isolation (nobody caps anything,
as with rule-of-thumb sizing) the job that pushes its device's real usage past capacity fails.
A failed job either stays failed (``retry="none"``) or is queued again to run alone on a device
(``retry="alone"``: what an operator does after an OOM), and counts once as an OOM.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from workers.placement.devices import DeviceState
from workers.placement.packing import DEFAULT_MAX_SKIPS, JobRequest, WaitReason, place_round

RunFn = Callable[[int], int]  # reservation bytes -> measured bytes; raises MemoryError on OOM


@dataclass
class SimJob:
    id: str
    need_bytes: int  # the reservation the placement policy asks for
    duration: float
    submit_at: float = 0.0
    true_bytes: int | None = None  # the job's real footprint on a device, when known in advance
    run: RunFn | None = None  # really run it (under its reservation) when it starts


@dataclass
class Outcome:
    job_id: str
    device: str
    start: float
    end: float
    reservation_bytes: int
    measured_bytes: int
    status: str  # "succeeded" or "oom"


@dataclass
class SimResult:
    outcomes: list[Outcome] = field(default_factory=list)
    waiting: dict[str, WaitReason] = field(default_factory=dict)  # never placed
    max_reserved: dict[str, int] = field(default_factory=dict)  # per device, over the run
    max_used: dict[str, int] = field(default_factory=dict)
    byte_seconds: float = 0.0  # integral of real bytes in use over all devices
    rounds: int = 0
    max_wait: dict[str, float] = field(default_factory=dict)  # submit -> first start, per job

    @property
    def makespan(self) -> float:
        return max((o.end for o in self.outcomes), default=0.0)

    @property
    def oom_jobs(self) -> set[str]:
        return {o.job_id for o in self.outcomes if o.status == "oom"}

    def succeeded(self) -> set[str]:
        return {o.job_id for o in self.outcomes if o.status == "succeeded"}


@dataclass
class _Running:
    job: SimJob
    device: str
    reservation: int
    used: int


def simulate(
    jobs: Sequence[SimJob],
    devices: dict[str, int],
    *,
    isolation: bool = True,
    retry: str = "none",
    max_skips: int = DEFAULT_MAX_SKIPS,
) -> SimResult:
    """Run ``jobs`` on ``devices`` (key → total bytes); all jobs end or stay waiting for good."""
    sim = _Sim(devices, isolation, retry, max_skips)
    arrivals = sorted(jobs, key=lambda j: j.submit_at)
    ends: list[tuple[float, int, str]] = []
    counter = itertools.count()
    now, i = 0.0, 0
    while True:
        while i < len(arrivals) and arrivals[i].submit_at <= now:
            sim.submit(arrivals[i], now)
            i += 1
        while ends and ends[0][0] <= now:
            sim.finish(heapq.heappop(ends)[2])
        while True:  # an OOM re-queues a job: plan again at the same instant
            started, requeued = sim.plan(now)
            for job_id, end in started:
                heapq.heappush(ends, (end, next(counter), job_id))
            if not requeued:
                break
        upcoming = [arrivals[i].submit_at] if i < len(arrivals) else []
        upcoming += [ends[0][0]] if ends else []
        if not upcoming:
            break  # whatever is still queued can never be placed
        sim.advance(min(upcoming) - now)
        now = min(upcoming)
    sim.result.waiting = {j.id: sim.reasons.get(j.id, WaitReason("never_placed", "")) for j in sim.queue}
    return sim.result


class _Sim:
    def __init__(self, devices: dict[str, int], isolation: bool, retry: str, max_skips: int) -> None:
        self.totals = devices
        self.isolation = isolation
        self.retry = retry
        self.max_skips = max_skips
        self.queue: list[SimJob] = []
        self.skips: dict[str, int] = {}
        self.submitted: dict[str, float] = {}
        self.running: dict[str, _Running] = {}
        self.reasons: dict[str, WaitReason] = {}
        self.retried: set[str] = set()
        self.result = SimResult()

    def submit(self, job: SimJob, now: float) -> None:
        self.queue.append(job)
        self.submitted.setdefault(job.id, now)

    def advance(self, dt: float) -> None:
        self.result.byte_seconds += dt * sum(r.used for r in self.running.values())

    def finish(self, job_id: str) -> None:
        self.running.pop(job_id, None)

    def device_states(self) -> list[DeviceState]:
        return [
            DeviceState(key=k, total_bytes=t, free_bytes=t, reserved_bytes=self._sum(k, "reservation"))
            for k, t in self.totals.items()
        ]

    def _sum(self, key: str, attr: str) -> int:
        return sum(getattr(r, attr) for r in self.running.values() if r.device == key)

    def plan(self, now: float) -> tuple[list[tuple[str, float]], bool]:
        self.result.rounds += 1
        requests = [JobRequest(j.id, j.need_bytes, self.skips.get(j.id, 0)) for j in self.queue]
        rnd = place_round(requests, self.device_states(), max_skips=self.max_skips)
        self.skips.update({str(k): v for k, v in rnd.skips.items()})
        self.reasons = {str(k): v for k, v in rnd.waiting.items()}
        by_id = {j.id: j for j in self.queue}
        started, requeued = [], False
        for p in rnd.placements:
            job = by_id[str(p.job_id)]
            self.queue.remove(job)
            end = self._start(job, p.device_key, p.reservation_bytes, now)
            if end is not None:
                started.append((job.id, end))
            requeued = requeued or any(j.id == job.id for j in self.queue)
        return started, requeued

    def _start(self, job: SimJob, device: str, reservation: int, now: float) -> float | None:
        self.result.max_wait.setdefault(job.id, now - self.submitted[job.id])
        used, oom = self._run(job, device, reservation)
        if oom:
            self.result.outcomes.append(Outcome(job.id, device, now, now, reservation, used, "oom"))
            if self.retry == "alone" and job.id not in self.retried:
                self.retried.add(job.id)
                self.queue.insert(
                    0, SimJob(job.id, self.totals[device], job.duration, now, job.true_bytes, job.run)
                )
            return None
        self.running[job.id] = _Running(job, device, reservation, used)
        self.result.outcomes.append(
            Outcome(job.id, device, now, now + job.duration, reservation, used, "succeeded")
        )
        self._watermarks(device)
        return now + job.duration

    def _run(self, job: SimJob, device: str, reservation: int) -> tuple[int, bool]:
        if job.run is not None:
            try:
                return job.run(reservation if self.isolation else self.totals[device]), False
            except MemoryError:
                return reservation, True
        true = job.true_bytes if job.true_bytes is not None else job.need_bytes
        if self.isolation:
            return true, true > reservation
        return true, self._sum(device, "used") + true > self.totals[device]

    def _watermarks(self, device: str) -> None:
        res = self.result
        res.max_reserved[device] = max(res.max_reserved.get(device, 0), self._sum(device, "reservation"))
        res.max_used[device] = max(res.max_used.get(device, 0), self._sum(device, "used"))
