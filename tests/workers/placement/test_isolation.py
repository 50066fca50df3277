import pytest
import torch

from workers.memory.allocator import SimulatedOutOfMemory
from workers.placement.devices import MIB
from workers.placement.isolation import SimulatedDeviceGuard, allocator_budget, cap_process_memory

from .conftest import TinyJob


def test_a_job_within_its_reservation_trains_and_reports_its_replayed_peak() -> None:
    job = TinyJob(hidden=256, batch=128)
    measured = job.run(job.reservation())
    assert 0 < measured <= job.reservation()


def test_the_replayed_peak_of_a_real_run_is_within_the_estimate() -> None:
    # The estimate models a CUDA run (workspaces included), the replay sees the CPU run's storages.
    job = TinyJob(hidden=1024, batch=512)
    assert job.run(job.reservation()) <= job.reservation(underestimate=1.0)


def test_a_job_over_its_reservation_raises_a_simulated_oom() -> None:
    job = TinyJob(hidden=1024, batch=512)
    with pytest.raises(SimulatedOutOfMemory):
        job.run(job.reservation(underestimate=0.05))


def test_storages_freed_by_the_job_are_returned_to_the_replayed_allocator() -> None:
    guard = SimulatedDeviceGuard(64 * MIB)
    with guard:
        for _ in range(20):  # 20 x 4 MiB, one at a time: would need 80 MiB if never freed
            x = torch.ones(1024, 1024)
            del x
    assert guard.peak_allocated_bytes == 4 * MIB


def test_the_cuda_context_is_outside_the_allocator_budget() -> None:
    assert allocator_budget(1536 * MIB, 512 * MIB) == 1024 * MIB


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU behaviour")
def test_capping_the_process_is_a_no_op_without_cuda() -> None:
    assert cap_process_memory(4 * 1024 * MIB) is None
