from workers.placement import DeviceState, JobRequest, place_round
from workers.placement.devices import GIB
from workers.placement.packing import HOLDING, INSUFFICIENT_MEMORY, NO_LIVE_DEVICE, TOO_LARGE


def _dev(key: str, total_gib: float, reserved_gib: float = 0, live: bool = True) -> DeviceState:
    total = int(total_gib * GIB)
    return DeviceState(
        key, total_bytes=total, free_bytes=total, reserved_bytes=int(reserved_gib * GIB), live=live
    )


def test_a_job_goes_to_the_device_it_fits_most_tightly() -> None:
    result = place_round(
        [JobRequest("j", 5 * GIB)], [_dev("a", 24), _dev("b", 16, reserved_gib=10), _dev("c", 8)]
    )
    assert [(p.job_id, p.device_key) for p in result.placements] == [("j", "b")]


def test_jobs_placed_in_one_round_count_against_each_other() -> None:
    result = place_round([JobRequest(i, 6 * GIB) for i in range(5)], [_dev("a", 16), _dev("b", 8)])
    per_device = {k: sum(p.reservation_bytes for p in result.placements if p.device_key == k) for k in "ab"}
    assert per_device == {"a": 12 * GIB, "b": 6 * GIB}
    assert set(result.waiting) == {3, 4} and result.waiting[3].code == INSUFFICIENT_MEMORY


def test_a_stale_device_gets_no_job() -> None:
    result = place_round([JobRequest("j", GIB)], [_dev("stale", 24, live=False)])
    assert result.placements == [] and result.waiting["j"].code == NO_LIVE_DEVICE


def test_a_job_larger_than_every_device_waits_as_too_large_and_holds_nothing() -> None:
    result = place_round([JobRequest("huge", 40 * GIB, skips=99), JobRequest("s", GIB)], [_dev("a", 24)])
    assert result.waiting["huge"].code == TOO_LARGE and result.held_device is None
    assert [p.job_id for p in result.placements] == ["s"]


def test_a_job_passed_over_by_a_later_job_gains_a_skip() -> None:
    result = place_round(
        [JobRequest("big", 20 * GIB, skips=1), JobRequest("s", GIB)], [_dev("a", 24, reserved_gib=8)]
    )
    assert result.skips == {"big": 2}


def test_a_job_not_passed_over_gains_no_skip() -> None:
    result = place_round([JobRequest("s", GIB), JobRequest("big", 20 * GIB)], [_dev("a", 24, reserved_gib=8)])
    assert result.skips == {"big": 0}


def test_a_starving_job_holds_the_device_closest_to_fitting_it() -> None:
    queue = [JobRequest("big", 20 * GIB, skips=3), JobRequest("s1", GIB), JobRequest("s2", GIB)]
    result = place_round(queue, [_dev("a", 24, reserved_gib=8), _dev("b", 24, reserved_gib=12)], max_skips=3)
    assert result.held_device == "a" and result.waiting["big"].code == HOLDING
    assert {p.device_key for p in result.placements} == {"b"}
