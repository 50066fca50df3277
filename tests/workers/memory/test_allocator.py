"""The caching-allocator simulator against hand-worked allocation sequences."""

import pytest

from workers.memory.allocator import (
    MIB,
    CachingAllocatorSimulator,
    SimulatedOutOfMemory,
    round_size,
    segment_size,
)


def test_requests_round_up_to_512_bytes():
    assert [round_size(n) for n in (1, 512, 513, 1000)] == [512, 512, 1024, 1024]


def test_segment_sizes_follow_the_pool_rules():
    assert segment_size(512) == 2 * MIB  # small pool
    assert segment_size(1 * MIB) == 2 * MIB  # 1 MiB is still small
    assert segment_size(1 * MIB + 512) == 20 * MIB  # large, under 10 MiB
    assert segment_size(10 * MIB) == 10 * MIB  # from 10 MiB: rounded to 2 MiB
    assert segment_size(10 * MIB + 1) == 12 * MIB


def test_small_requests_share_one_2mib_segment():
    sim = CachingAllocatorSimulator()
    sim.malloc(100)
    sim.malloc(700)
    assert sim.stats.allocated == 512 + 1024
    assert sim.stats.reserved == 2 * MIB
    assert sim.free_blocks(small=True) == [2 * MIB - 1536]


def test_mid_size_request_takes_a_20mib_segment_and_splits_it():
    sim = CachingAllocatorSimulator()
    sim.malloc(3 * MIB // 2)
    assert sim.stats.reserved == 20 * MIB
    assert sim.stats.allocated == 3 * MIB // 2
    assert sim.free_blocks(small=False) == [20 * MIB - 3 * MIB // 2]


def test_large_remainder_of_one_mib_or_less_is_not_split_and_counts_as_allocated():
    sim = CachingAllocatorSimulator()
    handle = sim.malloc(23 * MIB // 2)  # 11.5 MiB -> 12 MiB segment, 0.5 MiB left
    assert sim.allocated_size(handle) == 12 * MIB
    assert sim.stats.allocated == 12 * MIB
    assert sim.free_blocks(small=False) == []


def test_large_remainder_over_one_mib_is_split_off():
    sim = CachingAllocatorSimulator()
    handle = sim.malloc(21 * MIB // 2)  # 10.5 MiB -> 12 MiB segment, 1.5 MiB left
    assert sim.allocated_size(handle) == 21 * MIB // 2
    assert sim.free_blocks(small=False) == [3 * MIB // 2]


def test_freed_block_is_reused_without_a_new_segment():
    sim = CachingAllocatorSimulator()
    handle = sim.malloc(4 * MIB)
    sim.free(handle)
    sim.malloc(3 * MIB)
    assert sim.stats.reserved == 20 * MIB
    assert sim.stats.segments_allocated == 1


def test_best_fit_picks_the_smallest_cached_block_that_fits():
    sim = CachingAllocatorSimulator()
    big = sim.malloc(16 * MIB)  # its own 16 MiB segment
    small = sim.malloc(12 * MIB)  # its own 12 MiB segment
    sim.free(big)
    sim.free(small)
    handle = sim.malloc(11 * MIB)
    assert sim.allocated_size(handle) == 12 * MIB  # the 12 MiB block, unsplit (1 MiB left)
    assert sim.free_blocks(small=False) == [16 * MIB]


def test_free_neighbours_merge_within_a_segment():
    sim = CachingAllocatorSimulator()
    a = sim.malloc(4 * MIB)
    b = sim.malloc(4 * MIB)
    c = sim.malloc(4 * MIB)
    sim.free(a)
    sim.free(c)
    assert sorted(sim.free_blocks(small=False)) == [4 * MIB, 12 * MIB]
    sim.free(b)
    assert sim.free_blocks(small=False) == [20 * MIB]


def test_blocks_of_different_segments_never_merge_so_memory_fragments():
    sim = CachingAllocatorSimulator()
    first = sim.malloc(12 * MIB)
    second = sim.malloc(12 * MIB)
    sim.free(first)
    sim.free(second)
    sim.malloc(20 * MIB)  # 24 MiB are cached but no single block holds 20 MiB
    assert sim.free_blocks(small=False) == [12 * MIB, 12 * MIB]
    assert sim.stats.reserved == 44 * MIB
    assert sim.stats.peak_reserved == 44 * MIB


def test_small_requests_never_use_large_pool_blocks():
    sim = CachingAllocatorSimulator()
    sim.free(sim.malloc(4 * MIB))
    sim.malloc(1000)
    assert sim.stats.reserved == 22 * MIB


def test_cache_is_flushed_and_the_request_retried_before_an_oom():
    sim = CachingAllocatorSimulator(capacity=24 * MIB)
    sim.free(sim.malloc(12 * MIB))
    sim.malloc(14 * MIB)
    assert sim.stats.cache_flushes == 1
    assert sim.stats.reserved == 14 * MIB
    assert sim.stats.peak_reserved == 14 * MIB


def test_split_segments_cannot_be_released_so_the_request_fails():
    sim = CachingAllocatorSimulator(capacity=30 * MIB)
    sim.malloc(2 * MIB)  # keeps a piece of the 20 MiB segment: it cannot be released
    with pytest.raises(SimulatedOutOfMemory):
        sim.malloc(19 * MIB)  # the 18 MiB cached remainder is too small; 20 + 20 > 30
    assert sim.stats.cache_flushes == 1


def test_peak_allocated_tracks_the_high_water_mark():
    sim = CachingAllocatorSimulator()
    a = sim.malloc(8 * MIB)
    b = sim.malloc(8 * MIB)
    sim.free(a)
    sim.free(b)
    sim.malloc(MIB // 2)
    assert sim.stats.peak_allocated == 16 * MIB
    assert sim.stats.allocated == MIB // 2


def test_oom_path_releases_several_oversize_blocks_before_flushing_everything():
    # max_split_size 16 MiB: two cached 20 MiB oversize segments, neither alone enough for 30 MiB.
    sim = CachingAllocatorSimulator(capacity=64 * MIB, max_split_size=16 * MIB)
    a, b = sim.malloc(20 * MIB), sim.malloc(20 * MIB)
    small = sim.malloc(4 * MIB)  # a 20 MiB segment that stays in use
    sim.free(a)
    sim.free(b)
    sim.malloc(30 * MIB)  # 60 reserved + 30 > 64: release the 20 + 20 oversize blocks, not the rest
    assert sim.stats.cache_flushes == 0
    assert sim.stats.segments_released == 2
    assert sim.stats.reserved == 20 * MIB + 30 * MIB
    sim.free(small)
