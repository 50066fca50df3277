"""GPU workers report their devices: once when the worker is ready, then on a timer thread.

A worker consuming ``train.<host>.<index>`` queues reports the devices behind them (simulated
ones from ``DRIFTWATCH_SIMULATED_GPUS``, else real ones through NVML, or ``torch.cuda`` in a
short-lived subprocess when nvidia-ml-py is missing: CUDA must never be initialised in the
prefork parent, whose children would inherit a broken context). The heartbeat runs on a thread
of the worker's main process, so a long job in a child does not make its device look stale.
"""

import json
import logging
import os
import subprocess
import sys
import threading
from typing import Any

from celery.signals import worker_ready, worker_shutdown
from django.conf import settings
from django.db import close_old_connections

from retraining.inventory import DeviceReport, devices_report
from workers import queues
from workers.placement import parse_simulated_gpus
from workers.placement.devices import gpu_host

logger = logging.getLogger(__name__)
_stop = threading.Event()

_CUDA_QUERY = (
    "import json, torch\n"
    "out = []\n"
    "for i in range(torch.cuda.device_count()):\n"
    "    free, total = torch.cuda.mem_get_info(i)\n"
    "    cc = torch.cuda.get_device_capability(i)\n"
    "    out.append([i, torch.cuda.get_device_name(i), total, free, f'{cc[0]}.{cc[1]}'])\n"
    "print(json.dumps(out))\n"
)


def local_devices() -> list[DeviceReport]:
    """This machine's devices: simulated when configured, else the visible GPUs (none on CPU)."""
    spec = os.environ.get("DRIFTWATCH_SIMULATED_GPUS", "")
    if spec.strip():
        return [
            DeviceReport(d.index, d.name, d.total_bytes, d.total_bytes, simulated=True)
            for d in parse_simulated_gpus(spec)
        ]
    return _nvml_devices() if _has_nvml() else _torch_devices()


def _has_nvml() -> bool:
    try:
        import pynvml  # noqa: F401  (optional: nvidia-ml-py on GPU nodes)
    except ImportError:
        return False
    return True


def _nvml_devices() -> list[DeviceReport]:
    import pynvml  # optional (nvidia-ml-py): only GPU nodes have it

    pynvml.nvmlInit()
    reports = []
    for i in range(pynvml.nvmlDeviceGetCount()):
        handle = pynvml.nvmlDeviceGetHandleByIndex(i)
        mem = pynvml.nvmlDeviceGetMemoryInfo(handle)
        major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
        name = pynvml.nvmlDeviceGetName(handle)
        name = name.decode() if isinstance(name, bytes) else name
        reports.append(DeviceReport(i, name, int(mem.total), int(mem.free), False, f"{major}.{minor}"))
    return reports


def _torch_devices() -> list[DeviceReport]:
    out = subprocess.run([sys.executable, "-c", _CUDA_QUERY], capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        logger.warning("GPU query failed: %s", out.stderr[-500:])
        return []
    rows: list[list[Any]] = json.loads(out.stdout.strip().splitlines()[-1])
    return [DeviceReport(int(i), str(n), int(t), int(f), False, str(cc)) for i, n, t, f, cc in rows]


def served_devices(consumed: set[str], host: str) -> list[DeviceReport]:
    return [d for d in local_devices() if queues.train_queue(host, d.index) in consumed]


def heartbeat_once(consumed: set[str], host: str) -> int:
    devices = served_devices(consumed, host)
    if devices:
        close_old_connections()
        devices_report(host=host, devices=devices)
    return len(devices)


def _loop(consumed: set[str], host: str, every: float) -> None:
    while not _stop.is_set():
        try:
            heartbeat_once(consumed, host)
        except Exception:  # a database hiccup must not kill the heartbeat for good
            logger.exception("GPU heartbeat failed")
        _stop.wait(every)


@worker_ready.connect
def _start_heartbeat(sender: Any = None, **_kwargs: Any) -> None:
    consumed = {q.name for q in getattr(getattr(sender, "task_consumer", None), "queues", [])}
    if not any(name.startswith(queues.TRAIN_QUEUE_PREFIX + ".") for name in consumed):
        return
    every = float(settings.DRIFTWATCH_GPU_HEARTBEAT_SECONDS)
    thread = threading.Thread(
        target=_loop, args=(consumed, gpu_host(), every), daemon=True, name="gpu-heartbeat"
    )
    thread.start()
    logger.info("GPU heartbeat every %.0f s for %s", every, sorted(consumed))


@worker_shutdown.connect
def _stop_heartbeat(**_kwargs: Any) -> None:
    _stop.set()
