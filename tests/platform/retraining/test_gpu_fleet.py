"""GPU fleet on simulated devices: inventory, placement, reservations, isolation, re-placement.

Jobs are real retraining jobs (data → estimator → training under the simulated device's
allocator-replay guard), run in-process with ``job_run`` as the training task would."""

from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from registry.models import RegisteredModel
from retraining.execution import job_run
from retraining.inventory import DeviceReport, devices_live, devices_report, reserved_bytes
from retraining.models import GpuDevice, GpuPlacement, JobState, RetrainJob, RetrainPolicy
from retraining.placement import jobs_place, placed_plan, placement_is_current
from retraining.requests import job_request
from retraining.scheduling import jobs_reap_stale
from tests.platform.retraining.factories import count_traces, retrainable_model, serve
from workers.placement.devices import CUDA_CONTEXT_BYTES, GIB, MIB

pytestmark = pytest.mark.django_db


def sims(host: str, *sizes_gib: float, now: datetime | None = None) -> list[GpuDevice]:
    reports = [
        DeviceReport(i, f"sim{i}", int(g * GIB), int(g * GIB), simulated=True)
        for i, g in enumerate(sizes_gib)
    ]
    return devices_report(host=host, devices=reports, now=now)


def drifted(name: str) -> RegisteredModel:
    model = retrainable_model(name)
    t0 = datetime.now(UTC) - timedelta(hours=2)
    serve(model, 300, concept=0, seed=10, start=t0, prefix="old")
    serve(model, 900, concept=1, seed=11, start=t0 + timedelta(minutes=30), prefix="new")
    return model


def placement(job: RetrainJob) -> GpuPlacement:
    return GpuPlacement.objects.select_related("device").get(job=job)


def test_a_heartbeat_upserts_one_row_per_device_with_its_queue() -> None:
    sims("node-a", 24, 16)
    sims("node-a", 24, 16)
    rows = GpuDevice.objects.values_list("host", "index", "queue", "total_bytes", "simulated")
    assert list(rows) == [
        ("node-a", 0, "train.node-a.0", 24 * GIB, True),
        ("node-a", 1, "train.node-a.1", 16 * GIB, True),
    ]


def test_a_device_without_a_recent_heartbeat_is_not_live() -> None:
    sims("node-a", 24, now=timezone.now() - timedelta(minutes=5))
    assert not devices_live().exists()


def test_without_a_live_gpu_the_job_goes_to_a_cpu_worker() -> None:
    sims("node-a", 24, now=timezone.now() - timedelta(minutes=5))
    job = job_request(model=drifted("m"), trigger="api")
    p = placement(job)
    assert p.on_cpu and p.device is None and p.token == 1


def test_a_job_is_sized_and_placed_on_the_device_it_fits_most_tightly() -> None:
    sims("node-a", 24, 2)
    job = job_request(model=drifted("m"), trigger="api")
    assert jobs_place() == 1
    p = placement(job)
    assert (p.device.host, p.device.index) == ("node-a", 1)
    assert p.reserved_bytes == p.need_bytes > CUDA_CONTEXT_BYTES and p.token == 1
    assert p.plan["device"] == "cpu"  # a simulated device: the job itself trains on the CPU


def test_a_placed_job_trains_within_its_reservation_and_stores_the_measured_peak() -> None:
    sims("node-a", 24)
    job = job_request(model=drifted("m"), trigger="api")
    jobs_place()
    assert job_run(job_id=job.pk) == JobState.SUCCEEDED
    p = placement(job)
    job.refresh_from_db()
    assert 0 < p.measured_bytes <= p.reserved_bytes
    assert (
        job.plan["batch_size"] == p.plan["batch_size"]
        and job.estimated_peak_bytes == p.plan["estimated_bytes"]
    )


def test_a_placed_job_is_sized_once_and_trains_the_plan_stored_on_it(monkeypatch: pytest.MonkeyPatch) -> None:
    traces = count_traces(monkeypatch)
    sims("node-a", 24)
    job = job_request(model=drifted("m"), trigger="api")
    jobs_place()
    job.refresh_from_db()
    assert len(traces) == 1 and job.plan["batch_size"] == placement(job).plan["batch_size"]
    assert job_run(job_id=job.pk) == JobState.SUCCEEDED
    assert len(traces) == 1  # the worker trained the placement's plan without tracing again


def test_the_reservation_is_released_when_the_job_ends() -> None:
    (device,) = sims("node-a", 24)
    job = job_request(model=drifted("m"), trigger="api")
    jobs_place()
    assert reserved_bytes(device) == placement(job).reserved_bytes > 0
    job_run(job_id=job.pk)
    jobs_place()
    assert reserved_bytes(device) == 0 and placement(job).released_at is not None


def test_a_job_reserved_too_low_fails_alone_while_its_neighbour_completes() -> None:
    sims("node-a", 24)
    low = job_request(model=drifted("low"), trigger="api")
    ok = job_request(model=drifted("ok"), trigger="api")
    jobs_place()
    # The estimate made too low on purpose: the reservation leaves the allocator 1 MiB.
    GpuPlacement.objects.filter(job=low).update(reserved_bytes=CUDA_CONTEXT_BYTES + MIB)
    assert placement(low).device_id == placement(ok).device_id  # neighbours on one device
    assert job_run(job_id=low.pk) == JobState.FAILED
    assert job_run(job_id=ok.pk) == JobState.SUCCEEDED
    low.refresh_from_db()
    assert low.oom_events and "simulated CUDA OOM" in low.oom_events[0]["detail"]


def test_a_job_that_does_not_fit_now_waits_with_its_reason() -> None:
    (device,) = sims("node-a", 24)
    first = job_request(model=drifted("first"), trigger="api")
    jobs_place()
    GpuPlacement.objects.filter(job=first).update(reserved_bytes=24 * GIB - 10 * MIB)  # the device is full
    second = job_request(model=drifted("second"), trigger="api")
    assert jobs_place() == 0
    p = placement(second)
    assert p.device is None and p.wait_reason == "insufficient_memory" and p.need_bytes > 10 * MIB


def test_a_job_reaped_from_a_dead_worker_is_placed_again_and_its_old_message_is_void() -> None:
    sims("node-a", 24)
    job = job_request(model=drifted("m"), trigger="api")
    jobs_place()
    RetrainPolicy.objects.filter(model=job.model).update(max_attempts=3)
    RetrainJob.objects.filter(pk=job.pk).update(
        state=JobState.RUNNING, attempts=1, heartbeat_at=timezone.now()
    )
    assert jobs_reap_stale(now=timezone.now() + timedelta(minutes=10)) == 1
    sims("node-a", 24)
    assert jobs_place() == 1
    assert placement(job).token == 2
    assert not placement_is_current(job.pk, 1) and placement_is_current(job.pk, 2)


def test_a_queued_job_on_a_device_that_went_stale_is_placed_on_a_live_one() -> None:
    sims("node-a", 24)
    job = job_request(model=drifted("m"), trigger="api")
    jobs_place()
    sims("node-a", 24, now=timezone.now() - timedelta(minutes=5))  # node-a stops reporting
    sims("node-b", 24)
    assert jobs_place() == 1
    assert placement(job).device.host == "node-b" and placement(job).token == 2


def test_the_gpu_page_shows_devices_their_jobs_and_the_waiting_queue() -> None:
    sims("node-a", 24)
    placed = job_request(model=drifted("placed"), trigger="api")
    jobs_place()
    GpuPlacement.objects.filter(job=placed).update(reserved_bytes=24 * GIB - 10 * MIB)
    waiting = job_request(model=drifted("waiting"), trigger="api")
    jobs_place()
    client = Client()
    client.force_login(User.objects.create_user("ops", password="pw-ops-12345", is_staff=True))
    html = client.get("/gpu/").content.decode()
    assert "train.node-a.0" in html and f"#{placed.pk}" in html
    assert f"#{waiting.pk}" in html and "insufficient_memory" in html


def test_a_job_on_a_simulated_device_trains_on_the_cpu_whatever_its_sized_plan_says() -> None:
    sims("node-a", 24)
    job = job_request(model=drifted("m"), trigger="api")
    jobs_place()
    p = placement(job)
    GpuPlacement.objects.filter(pk=p.pk).update(plan={**p.plan, "device": "cuda"})  # sized for a GPU
    assert placed_plan(job.pk).device == "cpu"
