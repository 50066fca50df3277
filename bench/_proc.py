"""This process's memory as the kernel counts it (/proc/self/status), for the benches that run a
measured step in a fresh child process.

Not ``getrusage``'s ``ru_maxrss``: Linux keeps it across fork and exec, so a child started from a
parent holding 1.6 GiB reports at least 1.6 GiB whatever it does. ``VmHWM`` is the high-water mark
of the process's own address space, new at exec.
"""

from pathlib import Path


def status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def peak_rss_mib() -> float:
    return status_kib("VmHWM") / 1024
