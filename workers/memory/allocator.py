"""A replay simulator of PyTorch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp).

Pure Python, no torch: it takes the allocation/free sequence of a training step and tells what
``torch.cuda.max_memory_allocated()`` and ``max_memory_reserved()`` would report.

Rules modelled (default allocator config, one stream, no expandable segments):
- every request is rounded up to a multiple of 512 bytes (kMinBlockSize);
- requests <= 1 MiB (kSmallSize) live in the small pool, carved from 2 MiB segments;
- larger requests live in the large pool: < 10 MiB (kMinLargeAlloc) get a 20 MiB segment
  (kLargeBuffer), larger ones a segment rounded up to 2 MiB (kRoundLarge);
- a request takes the best-fitting cached block of its pool (smallest size, then lowest address);
- a block is split when the remainder is >= 512 bytes (small pool) or > 1 MiB (large pool,
  and only for requests below max_split_size); an unsplit block counts whole as allocated;
- a freed block merges with free neighbours of its own segment only;
- when a new segment would exceed the device capacity, cached blocks are released (only whole,
  unsplit free segments can be returned) and the allocation retried before an OOM is raised.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

KIB = 1024
MIB = 1024 * KIB
MIN_BLOCK_SIZE = 512
SMALL_SIZE = 1 * MIB
SMALL_BUFFER = 2 * MIB
LARGE_BUFFER = 20 * MIB
MIN_LARGE_ALLOC = 10 * MIB
ROUND_LARGE = 2 * MIB
UNLIMITED = 1 << 62


class SimulatedOutOfMemory(MemoryError):
    """Raised when a request cannot be served even after releasing the cache."""

    def __init__(self, requested: int, reserved: int, capacity: int) -> None:
        super().__init__(
            f"simulated CUDA OOM: request {requested} B with {reserved} B reserved of {capacity} B capacity"
        )
        self.requested = requested


def round_size(size: int) -> int:
    """Bytes a request really takes: at least 512, rounded up to a multiple of 512."""
    if size < MIN_BLOCK_SIZE:
        return MIN_BLOCK_SIZE
    return MIN_BLOCK_SIZE * ((size + MIN_BLOCK_SIZE - 1) // MIN_BLOCK_SIZE)


def segment_size(rounded: int) -> int:
    """Bytes of the cudaMalloc made when no cached block can serve ``rounded`` bytes."""
    if rounded <= SMALL_SIZE:
        return SMALL_BUFFER
    if rounded < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return ROUND_LARGE * ((rounded + ROUND_LARGE - 1) // ROUND_LARGE)


def is_small(rounded: int) -> bool:
    return rounded <= SMALL_SIZE


def _whole_segment(block: Block) -> bool:
    # Only a free block spanning its whole segment can be cudaFree'd.
    return block.prev is None and block.next is None


@dataclass(eq=False)
class Block:
    addr: int
    size: int
    small: bool
    segment: int
    allocated: bool = False
    prev: Block | None = None
    next: Block | None = None

    def key(self) -> tuple[int, int]:
        return (self.size, self.addr)


@dataclass
class AllocatorStats:
    allocated: int = 0
    reserved: int = 0
    peak_allocated: int = 0
    peak_reserved: int = 0
    segments_allocated: int = 0
    segments_released: int = 0
    cache_flushes: int = 0


@dataclass
class CachingAllocatorSimulator:
    """Replays malloc/free calls; handles are opaque ints returned by :meth:`malloc`."""

    capacity: int = UNLIMITED
    max_split_size: int = UNLIMITED
    stats: AllocatorStats = field(default_factory=AllocatorStats)

    def __post_init__(self) -> None:
        # Free blocks of each pool, sorted like the C++ BlockComparatorSize: (size, address).
        self._free: dict[bool, list[tuple[int, int]]] = {True: [], False: []}
        self._by_key: dict[tuple[bool, int, int], Block] = {}
        self._live: dict[int, Block] = {}
        self._next_handle = 1
        self._next_addr = 0
        self._next_segment = 0

    # -- public API -------------------------------------------------------------------------
    def malloc(self, size: int) -> int:
        """Serve a request of ``size`` bytes; returns a handle for :meth:`free`."""
        rounded = round_size(size)
        small = is_small(rounded)
        block = self._take_cached(rounded, small) or self._new_segment(rounded, small)
        if self._should_split(block, rounded):
            self._split(block, rounded)
        block.allocated = True
        self._add_allocated(block.size)
        handle = self._next_handle
        self._next_handle += 1
        self._live[handle] = block
        return handle

    def free(self, handle: int) -> None:
        block = self._live.pop(handle)
        block.allocated = False
        self.stats.allocated -= block.size
        block = self._merge(block)
        self._insert_free(block)

    def empty_cache(self) -> None:
        """torch.cuda.empty_cache(): return every whole free segment to the device."""
        for small in (True, False):
            for size, addr in list(self._free[small]):
                block = self._by_key[(small, size, addr)]
                if _whole_segment(block):
                    self._release(block)

    def allocated_size(self, handle: int) -> int:
        return self._live[handle].size

    @property
    def cached_bytes(self) -> int:
        return self.stats.reserved - self.stats.allocated

    # -- allocation path --------------------------------------------------------------------
    def _take_cached(self, rounded: int, small: bool) -> Block | None:
        pool = self._free[small]
        i = bisect.bisect_left(pool, (rounded, -1))
        if i == len(pool):
            return None
        size, addr = pool[i]
        # Oversize blocks are kept for oversize requests only (max_split_size config).
        if rounded < self.max_split_size <= size:
            return None
        if rounded >= self.max_split_size and size >= rounded + LARGE_BUFFER:
            return None
        del pool[i]
        return self._by_key.pop((small, size, addr))

    def _new_segment(self, rounded: int, small: bool) -> Block:
        nbytes = segment_size(rounded)
        if self.stats.reserved + nbytes > self.capacity:
            # The C++ retry path: release cached blocks big enough (only with max_split_size),
            # then flush the whole cache, then give up.
            self._release_available(rounded, small)
            if self.stats.reserved + nbytes > self.capacity:
                self.stats.cache_flushes += 1
                self.empty_cache()
            if self.stats.reserved + nbytes > self.capacity:
                raise SimulatedOutOfMemory(rounded, self.stats.reserved, self.capacity)
        block = Block(addr=self._next_addr, size=nbytes, small=small, segment=self._next_segment)
        self._next_addr += nbytes
        self._next_segment += 1
        self.stats.reserved += nbytes
        self.stats.segments_allocated += 1
        self.stats.peak_reserved = max(self.stats.peak_reserved, self.stats.reserved)
        return block

    def _release_available(self, rounded: int, small: bool) -> None:
        """``release_available_cached_blocks``: the smallest cached block of at least
        max(request, max_split_size); failing that, oversize blocks from the largest down until
        that many bytes are released (PyTorch releases them even when they fall short)."""
        if self.max_split_size == UNLIMITED:
            return
        need = max(rounded, self.max_split_size)
        for size, addr in list(self._free[small]):
            block = self._by_key[(small, size, addr)]
            if size >= need and _whole_segment(block):
                self._release(block)
                return
        released = 0
        for size, addr in reversed(list(self._free[small])):
            if released >= need or size < self.max_split_size:
                break
            block = self._by_key[(small, size, addr)]
            if _whole_segment(block):
                self._release(block)
                released += size

    def _release(self, block: Block) -> None:
        self._remove_free(block)
        self.stats.reserved -= block.size
        self.stats.segments_released += 1

    def _should_split(self, block: Block, rounded: int) -> bool:
        remaining = block.size - rounded
        if block.small:
            return remaining >= MIN_BLOCK_SIZE
        return rounded < self.max_split_size and remaining > SMALL_SIZE

    def _split(self, block: Block, rounded: int) -> None:
        rest = Block(
            addr=block.addr + rounded,
            size=block.size - rounded,
            small=block.small,
            segment=block.segment,
            prev=block,
            next=block.next,
        )
        if block.next is not None:
            block.next.prev = rest
        block.next = rest
        block.size = rounded
        self._insert_free(rest)

    def _add_allocated(self, nbytes: int) -> None:
        self.stats.allocated += nbytes
        self.stats.peak_allocated = max(self.stats.peak_allocated, self.stats.allocated)

    # -- free path --------------------------------------------------------------------------
    def _merge(self, block: Block) -> Block:
        # Neighbours are linked only inside one segment, so merging never crosses segments.
        nxt = block.next
        if nxt is not None and not nxt.allocated:
            self._remove_free(nxt)
            _absorb(block, nxt)
        prv = block.prev
        if prv is not None and not prv.allocated:
            self._remove_free(prv)
            _absorb(prv, block)
            block = prv
        return block

    def _insert_free(self, block: Block) -> None:
        bisect.insort(self._free[block.small], block.key())
        self._by_key[(block.small, block.size, block.addr)] = block

    def _remove_free(self, block: Block) -> None:
        pool = self._free[block.small]
        i = bisect.bisect_left(pool, block.key())
        del pool[i]
        del self._by_key[(block.small, block.size, block.addr)]

    def free_blocks(self, small: bool) -> list[int]:
        """Sizes of the cached free blocks of one pool, smallest first (for tests and debugging)."""
        return [size for size, _ in self._free[small]]


def _absorb(left: Block, right: Block) -> None:
    """Fold `right` (the block just after `left` in the same segment) into `left`."""
    left.size += right.size
    left.next = right.next
    if right.next is not None:
        right.next.prev = left
