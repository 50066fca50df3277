import pytest

from workers.placement import (
    CUDA_CONTEXT_BYTES,
    DeviceState,
    parse_simulated_gpus,
    parse_size,
    reservation_bytes,
)
from workers.placement.devices import GIB, MIB


def test_simulated_gpus_are_parsed_in_order_with_their_capacity() -> None:
    devices = parse_simulated_gpus("sim0:24GiB, sim1:16GiB")
    assert [(d.name, d.index, d.total_bytes) for d in devices] == [
        ("sim0", 0, 24 * GIB),
        ("sim1", 1, 16 * GIB),
    ]


def test_an_empty_simulated_gpu_setting_means_no_devices() -> None:
    assert parse_simulated_gpus("") == [] and parse_simulated_gpus(None) == []


@pytest.mark.parametrize("spec", ["sim0", "sim0:lots", ":4GiB", "sim0:100MiB", "a:1GiB,a:2GiB"])
def test_a_bad_simulated_gpu_setting_is_refused(spec: str) -> None:
    with pytest.raises(ValueError, match="DRIFTWATCH_SIMULATED_GPUS|memory size"):
        parse_simulated_gpus(spec)


def test_sizes_accept_binary_and_decimal_units() -> None:
    assert (parse_size("512MiB"), parse_size("1.5GiB"), parse_size("2GB"), parse_size("4096")) == (
        512 * MIB,
        int(1.5 * GIB),
        2 * 10**9,
        4096,
    )


def test_a_reservation_is_the_estimate_plus_margin_plus_the_cuda_context() -> None:
    assert reservation_bytes(1000 * MIB, margin=0.1) == 1100 * MIB + CUDA_CONTEXT_BYTES


def test_memory_used_by_another_process_is_not_available() -> None:
    # 10 GiB used on the device, 3 GiB of it by our placed job: 7 GiB belong to someone else.
    device = DeviceState(
        "h:0",
        total_bytes=24 * GIB,
        free_bytes=14 * GIB,
        reserved_bytes=4 * GIB,
        in_use_by_placed_bytes=3 * GIB,
    )
    assert device.available_bytes == 24 * GIB - 7 * GIB - 4 * GIB
