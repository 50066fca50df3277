"""The device model the placer reasons about, and simulated devices for machines without GPUs.

A job placed on a device takes ``reservation_bytes(estimate)``: its estimated peak of the caching
allocator (``MemoryEstimate.peak_reserved_bytes``) plus a relative margin for estimator error,
plus the CUDA context every new process creates (not allocator memory, so not in the estimate's
reserved figure). A device can take a job when that reservation fits into what is left of it:

    available = total - foreign - sum(reservations of the jobs placed there)

where ``foreign`` is memory in use that no placed job accounts for (another process on the GPU),
derived from the free memory the device last reported.
"""

from __future__ import annotations

import math
import os
import re
import socket
from dataclasses import dataclass, replace

MIB = 1024**2
GIB = 1024**3
# What a new CUDA process costs before its first tensor (driver context, kernels, cuBLAS handles
# outside the allocator): about 300-600 MiB depending on the GPU and the CUDA version.
CUDA_CONTEXT_BYTES = 512 * MIB
DEFAULT_MARGIN = 0.10  # the estimator's worst measured error is ~3 %; keep 10 % like plan_batch_size

_UNITS = {"": 1, "b": 1, "kib": 1024, "mib": MIB, "gib": GIB, "kb": 10**3, "mb": 10**6, "gb": 10**9}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(text: str) -> int:
    """``"24GiB"``, ``"512MiB"``, ``"16GB"`` or a plain byte count → bytes."""
    match = _SIZE.match(text)
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in _UNITS:
        raise ValueError(f"not a memory size: {text!r} (use e.g. 24GiB, 512MiB, 16GB)")
    return int(float(match.group(1)) * _UNITS[unit])


@dataclass(frozen=True)
class SimulatedGpu:
    """A device that exists only in the inventory: jobs run on the CPU, capped by allocator replay."""

    name: str
    index: int
    total_bytes: int


def parse_simulated_gpus(spec: str | None) -> list[SimulatedGpu]:
    """Parse ``DRIFTWATCH_SIMULATED_GPUS`` (``"sim0:24GiB,sim1:16GiB"``); empty → no devices."""
    devices: list[SimulatedGpu] = []
    for index, item in enumerate(p.strip() for p in (spec or "").split(",") if p.strip()):
        name, sep, size = item.partition(":")
        if not sep or not name.strip():
            raise ValueError(f"DRIFTWATCH_SIMULATED_GPUS item {index}: {item!r} is not NAME:SIZE")
        total = parse_size(size)
        if total <= CUDA_CONTEXT_BYTES:
            raise ValueError(
                f"DRIFTWATCH_SIMULATED_GPUS item {index}: {size!r} is smaller than a CUDA context"
            )
        devices.append(SimulatedGpu(name=name.strip(), index=index, total_bytes=total))
    names = [d.name for d in devices]
    if len(set(names)) != len(names):
        raise ValueError("DRIFTWATCH_SIMULATED_GPUS: device names must be unique")
    return devices


def gpu_host() -> str:
    """The host part of this machine's device queues: ``DRIFTWATCH_GPU_HOST`` or the hostname."""
    return os.environ.get("DRIFTWATCH_GPU_HOST") or socket.gethostname()


def reservation_bytes(
    estimated_bytes: int, *, margin: float = DEFAULT_MARGIN, context_bytes: int = CUDA_CONTEXT_BYTES
) -> int:
    """What a job with this estimated allocator peak takes from a device."""
    if estimated_bytes < 0 or not 0.0 <= margin < 1.0:
        raise ValueError("estimated_bytes must be >= 0 and margin in [0, 1)")
    return math.ceil(estimated_bytes * (1.0 + margin)) + context_bytes


@dataclass(frozen=True)
class DeviceState:
    """One device as the placer sees it at the start of a planning round."""

    key: str  # stable identity, e.g. "gpu-node-1:0"
    total_bytes: int
    free_bytes: int  # as last reported by the device (mem_get_info / NVML, or simulated)
    reserved_bytes: int = 0  # sum of the reservations of jobs placed there and not finished
    in_use_by_placed_bytes: int = 0  # how much of (total - free) those jobs account for now
    live: bool = True  # heartbeat fresh; a stale device gets no new job

    @property
    def foreign_bytes(self) -> int:
        return max(0, self.total_bytes - self.free_bytes - self.in_use_by_placed_bytes)

    @property
    def available_bytes(self) -> int:
        return self.total_bytes - self.foreign_bytes - self.reserved_bytes

    def with_reservation(self, nbytes: int) -> DeviceState:
        return replace(self, reserved_bytes=self.reserved_bytes + nbytes)
