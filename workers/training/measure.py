"""What a training run costs, measured where a counter exists and never invented.

- memory the worker can give a job: GPU free memory (``torch.cuda.mem_get_info``), else the
  cgroup's headroom or MemAvailable from /proc/meminfo;
- energy: NVML's total-energy counter on a GPU, else Intel RAPL (powercap) when readable;
  otherwise None;
- CPU peak of live tensor bytes: torch.profiler memory events over the first optimizer steps
  (each step of equal batch size repeats the same allocations, so the peak is reached early).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RAPL_ROOT = Path("/sys/class/powercap")


def available_memory_bytes(device: str = "cpu") -> int:
    """Free memory a training job could use now on this worker."""
    if device.startswith("cuda"):
        import torch  # lazy: only GPU workers reach this

        free, _total = torch.cuda.mem_get_info()
        return int(free)
    available = _meminfo_available()
    cgroup = _cgroup_headroom()
    return min(available, cgroup) if cgroup is not None else available


def _meminfo_available() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("MemAvailable missing from /proc/meminfo")


def _cgroup_headroom() -> int | None:
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit == "max":
            return None
        used = int(Path("/sys/fs/cgroup/memory.current").read_text())
        return max(0, int(limit) - used)
    except (OSError, ValueError):
        return None


def _rapl_files() -> list[Path]:
    try:
        files = sorted(RAPL_ROOT.glob("intel-rapl:[0-9]*/energy_uj"))
        for f in files:
            f.read_text()  # unreadable (root-only since 2020) means no counter
        return files
    except OSError:
        return []


@dataclass
class EnergyMeter:
    """Joules between start() and stop(), or None where no counter is readable."""

    device: str = "cpu"
    _start: float | None = None
    _source: str | None = None

    def start(self) -> EnergyMeter:
        self._start = self._read()
        return self

    def stop(self) -> float | None:
        end = self._read()
        if self._start is None or end is None:
            return None
        return max(0.0, end - self._start)

    def _read(self) -> float | None:
        if self.device.startswith("cuda"):
            return _nvml_joules()
        files = _rapl_files()
        if not files:
            return None
        self._source = "rapl"
        return sum(int(f.read_text()) for f in files) / 1e6


def _nvml_joules() -> float | None:
    try:
        import pynvml  # lazy and optional: only GPU workers have it

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        return float(pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)) / 1e3  # mJ
    except Exception:
        return None


def live_bytes(tensors: list[Any]) -> int:
    """Bytes of the distinct storages behind these tensors."""
    import torch  # lazy: see the package docstring

    storages = {
        id(t.untyped_storage()): t.untyped_storage().nbytes() for t in tensors if isinstance(t, torch.Tensor)
    }
    return sum(storages.values())


@dataclass
class PeakRecorder:
    """The peak measured by :func:`record_cpu_peak` (live bytes at start + highest running sum)."""

    baseline: int = 0
    peak_bytes: int | None = None


@contextlib.contextmanager
def record_cpu_peak(baseline: int) -> Iterator[PeakRecorder]:
    from torch.profiler import ProfilerActivity, profile  # lazy: see the package docstring

    recorder = PeakRecorder(baseline=baseline)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        yield recorder
    # The kineto list holds every [memory] event in allocation order (FunctionEvents fold them).
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    events = [e for e in events if str(e.device_type()).upper().endswith("CPU")]
    events.sort(key=lambda e: e.start_ns())
    running = peak = 0
    for event in events:
        running += event.nbytes()
        peak = max(peak, running)
    recorder.peak_bytes = baseline + peak


@dataclass
class Clock:
    wall_start: float = 0.0
    cpu_start: float = 0.0

    def start(self) -> Clock:
        self.wall_start, self.cpu_start = time.perf_counter(), time.process_time()
        return self

    def wall(self) -> float:
        return time.perf_counter() - self.wall_start

    def cpu(self) -> float:
        return time.process_time() - self.cpu_start
