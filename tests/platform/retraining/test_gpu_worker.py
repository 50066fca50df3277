"""A real GPU worker process with simulated devices: it reports them, the placer routes jobs to
their queues, collocated jobs complete within their reservations; killed, its devices go stale."""

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.test import override_settings

from retraining.inventory import devices_live
from retraining.models import GpuDevice, GpuPlacement, JobState, RetrainJob
from retraining.requests import job_request
from tests.platform.retraining.test_gpu_fleet import drifted

ROOT = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.slow


def wait_for(condition: Callable[[], Any], timeout: float = 480) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        connection.close()  # see the worker's commits
        time.sleep(0.5)
    raise AssertionError("timed out waiting for the GPU worker")


def gpu_worker(log: Path) -> subprocess.Popen[bytes]:
    settings = connection.settings_dict
    if connection.vendor == "postgresql":
        url = f"postgres://{settings['USER']}@{settings['HOST']}:{settings['PORT']}/{settings['NAME']}"
    else:
        url = f"sqlite:///{settings['NAME']}"
    env = {
        **os.environ,
        "DATABASE_URL": url,
        "DRIFTWATCH_SIMULATED_GPUS": "sim0:2GiB,sim1:1GiB",
        "DRIFTWATCH_GPU_HOST": "e2e",
        "DRIFTWATCH_GPU_HEARTBEAT_SECONDS": "1",
    }
    command = [sys.executable, "-m", "celery", "-A", "workers.celery_app", "worker",
               "-Q", "train.e2e.0,train.e2e.1,default", "-P", "prefork", "-c", "2",
               "--prefetch-multiplier", "1", "--without-gossip", "--without-mingle", "-l", "info"]  # fmt: skip
    return subprocess.Popen(command, cwd=ROOT, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT)


@override_settings(DRIFTWATCH_GPU_STALE_SECONDS=5)
def test_jobs_run_on_the_simulated_devices_a_worker_reports(transactional_db: None, tmp_path: Path) -> None:
    from workers.celery_app import app

    app.control.purge()
    models = [drifted(f"gpu{i}") for i in range(3)]
    worker = gpu_worker(tmp_path / "worker.log")
    try:
        wait_for(lambda: devices_live().count() == 2)
        jobs = [job_request(model=m, trigger="api") for m in models]
        wait_for(
            lambda: (
                RetrainJob.objects.filter(pk__in=[j.pk for j in jobs], state=JobState.SUCCEEDED).count() == 3
            )
        )
        placements = GpuPlacement.objects.filter(job__in=jobs).select_related("device")
        assert {p.device.queue for p in placements} <= {"train.e2e.0", "train.e2e.1"}
        assert all(0 < p.measured_bytes <= p.reserved_bytes for p in placements)
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=30)
        wait_for(lambda: not devices_live().exists(), timeout=30)
        assert GpuDevice.objects.count() == 2  # still listed, no longer used
    finally:
        worker.kill()
        print((tmp_path / "worker.log").read_text()[-3000:])
