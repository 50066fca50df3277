"""GPU placement engine: which device runs which retraining job, and how a job is held to it.

No Django, no Celery. torch is imported lazily (only the isolation guard and the real-GPU cap
need it), so the beat process can plan without importing torch.

- :mod:`.devices`    device model (capacity, free, reservations, CUDA context, margin) and the
                     ``DRIFTWATCH_SIMULATED_GPUS`` parser;
- :mod:`.packing`    best-fit placement of queued jobs in order, with an anti-starvation rule;
- :mod:`.isolation`  a job capped at its reservation: ``set_per_process_memory_fraction`` on a
                     real GPU, the CUDA caching-allocator replay on a simulated one;
- :mod:`.simulation` an event loop that runs a queue of jobs on devices (tests, bench).
"""

from workers.placement.devices import (
    CUDA_CONTEXT_BYTES,
    DeviceState,
    SimulatedGpu,
    parse_simulated_gpus,
    parse_size,
    reservation_bytes,
)
from workers.placement.packing import (
    DEFAULT_MAX_SKIPS,
    JobRequest,
    Placement,
    RoundResult,
    WaitReason,
    place_round,
)

__all__ = [
    "CUDA_CONTEXT_BYTES",
    "DEFAULT_MAX_SKIPS",
    "DeviceState",
    "JobRequest",
    "Placement",
    "RoundResult",
    "SimulatedGpu",
    "WaitReason",
    "parse_simulated_gpus",
    "parse_size",
    "place_round",
    "reservation_bytes",
]
