"""Placement end to end on simulated devices, with jobs that really train on the CPU."""

import itertools

import pytest

from workers.placement.devices import GIB
from workers.placement.simulation import SimJob, SimResult, simulate

from .conftest import TinyJob

# Small simulated devices so that the tiny jobs (each ~0.6 GiB with its CUDA context) must queue.
DEVICES = {"sim0": 3 * GIB, "sim1": 2 * GIB}
SHAPES = [
    TinyJob(64, 32),
    TinyJob(256, 128),
    TinyJob(1024, 256, "sgd"),
    TinyJob(1024, 512),
    TinyJob(512, 64, "sgd"),
]


def _mixed_jobs(n: int) -> list[SimJob]:
    shapes = itertools.cycle(SHAPES)
    jobs = []
    for i in range(n):
        shape = next(shapes)
        jobs.append(SimJob(f"j{i}", shape.reservation(), duration=1.0 + (i % 4), run=shape.run))
    return jobs


@pytest.fixture(scope="module")
def twenty_jobs() -> SimResult:
    return simulate(_mixed_jobs(20), DEVICES)


def test_twenty_mixed_jobs_on_two_devices_never_over_commit_and_all_complete(twenty_jobs: SimResult) -> None:
    result = twenty_jobs
    assert all(result.max_reserved[d] <= DEVICES[d] for d in result.max_reserved)
    assert all(result.max_used[d] <= DEVICES[d] for d in result.max_used)
    assert result.succeeded() == {f"j{i}" for i in range(20)} and not result.oom_jobs


def test_the_queue_drains_after_jobs_waited_for_memory(twenty_jobs: SimResult) -> None:
    result = twenty_jobs
    assert result.waiting == {}
    assert max(result.max_wait.values()) > 0  # the devices really were full at some point


def test_a_job_estimated_too_low_fails_alone_while_its_neighbour_completes() -> None:
    shape = TinyJob(1024, 512)
    low = SimJob("low", shape.reservation(underestimate=0.05), 2.0, run=shape.run)
    neighbour = SimJob("ok", shape.reservation(), 2.0, run=shape.run)
    result = simulate([low, neighbour], {"sim0": 4 * GIB})
    assert {o.device for o in result.outcomes} == {"sim0"}  # they shared the device
    assert result.oom_jobs == {"low"} and result.succeeded() == {"ok"}


def _stream(max_skips: int) -> dict[str, float]:
    # A 3 GiB job at the head, then a small 1 GiB job every second, each running 2.5 s:
    # the 3.5 GiB device never empties by itself while the stream lasts (60 s).
    big = SimJob("big", 3 * GIB, 5.0, submit_at=0.5)
    small = [SimJob(f"s{i}", GIB, 2.5, submit_at=float(i)) for i in range(60)]
    result = simulate([big, *small], {"d": int(3.5 * GIB)}, max_skips=max_skips)
    return result.max_wait


def test_a_large_job_starts_within_the_starvation_bound() -> None:
    # Bound: max_skips rounds in which a later job was placed (one per second here), then the
    # held device drains within the longest running small job (2.5 s).
    assert _stream(max_skips=3)["big"] <= 3 * 1.0 + 2.5 + 1.0


def test_without_the_anti_starvation_rule_the_large_job_waits_for_the_whole_stream() -> None:
    assert _stream(max_skips=10**9)["big"] >= 55.0
