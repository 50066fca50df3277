"""This process's memory as the kernel counts it (/proc/self/status), for the benches that run a
measured step in a fresh child process.

Not ``getrusage``'s ``ru_maxrss``: Linux keeps it across fork and exec, so a child started from a
parent holding 1.6 GiB reports at least 1.6 GiB whatever it does. ``VmHWM`` is the high-water mark
of the process's own address space, new at exec. ``with_peak`` samples the anonymous resident
memory while one step runs in this process.
"""

import threading
import time
from pathlib import Path
from typing import Any


def status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def peak_rss_mib() -> float:
    return status_kib("VmHWM") / 1024


def with_peak(run: Any) -> tuple[int, int, float, Any]:
    """``run()`` while a thread samples this process's anonymous resident memory every 10 ms →
    (KiB before it, KiB at its peak, its seconds, what it returned)."""
    before = peak = status_kib("RssAnon")
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.wait(0.01):
            peak = max(peak, status_kib("RssAnon"))

    sampler = threading.Thread(target=sample)
    sampler.start()
    t = time.perf_counter()
    try:
        found = run()
    finally:
        seconds = time.perf_counter() - t
        done.set()
        sampler.join()
    return before, max(peak, status_kib("RssAnon")), seconds, found
