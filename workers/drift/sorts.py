"""One sort of a window's column per check, shared by the tests that need it sorted.

Wasserstein, the drill-down's quantile edges and histogram, and KS each sorted the same
1,000,000 values again (four sorts or partitions per numerical column: 15 of a 1M-row check's
CPU seconds went to ``ndarray.sort``). Inside ``shared_sorts()`` (a check wraps its computation
in it) ``sorted_finite`` sorts a column once and hands the same sorted array to every later
caller of the same column; outside it, every call sorts.

A column is known by its buffer (address, shape, strides, dtype), and the cache holds the
column itself while the context lasts, so no other array can take that address meanwhile.

``each_column`` works on a large window's columns on a thread per CPU (the drift tests, the
drill-down's distributions), all of them sharing the check's memo.

``sorted_sample`` is what the distance tests and the drill-down sort: the column itself up to
``SAMPLE_ABOVE`` finite values, a uniform sample of ``SAMPLE_SIZE`` of them past it (sorting 20
columns of 10,000,000 values was 8.8 s of a 10M-row check; a sample of a million sorts in 40 ms).
The scores made from a sample carry it and their stated error (``stats.wasserstein_sample_error``).
"""

import os
from collections.abc import Callable, Hashable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from contextvars import ContextVar, copy_context
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import pandas as pd

from workers.drift.summary import finite_values

T = TypeVar("T")
K = TypeVar("K")

_SHARED: ContextVar[dict[Hashable, tuple[Any, Any]] | None] = ContextVar("shared_sorts", default=None)


@contextmanager
def shared_sorts() -> Iterator[None]:
    """Within it, each column is sorted once (and each memoised result computed once)."""
    token = _SHARED.set({})
    try:
        yield
    finally:
        _SHARED.reset(token)


def column_key(series: pd.Series) -> tuple[Any, ...]:
    values = np.asarray(series)
    return (values.__array_interface__["data"][0], values.shape, values.strides, values.dtype.str)


def memo(key: Hashable, keep: Any, compute: Callable[[], T]) -> T:
    """``compute()`` once per key within ``shared_sorts()`` (every time outside it); ``keep``
    is held with the result so the objects the key names stay alive."""
    cache = _SHARED.get()
    if cache is None:
        return compute()
    if key not in cache:
        cache[key] = (keep, compute())
    return cache[key][1]  # type: ignore[no-any-return]


def sorted_finite(series: pd.Series) -> np.ndarray:
    """The column's values as float64, missing and ±inf dropped (evidently drops both), sorted."""

    return memo(_sorted_key(series), series, lambda: _sorted(series))


def in_check() -> bool:
    """Whether a ``shared_sorts()`` context (a check's computation) is open."""
    return _SHARED.get() is not None


def release_sorted(series: pd.Series) -> None:
    """Drop the column's sorted values (and sorted sample) from the check's memo: its last reader
    is done (a later one sorts again). At 10M rows × 20 columns the kept sorted copies were 1.6 GB."""
    cache = _SHARED.get()
    if cache is not None:
        cache.pop(_sorted_key(series), None)
        cache.pop(("sample",) + column_key(series), None)


def release_column(series: pd.Series) -> None:
    """Drop everything the check's memo holds for this column (its sorts, sample, counts, scores
    and drill-down): a column read for the check alone (``Window.feature``) is then let go once
    its tests are done, rather than held by the memo to the check's end."""
    cache = _SHARED.get()
    if cache is None:
        return
    key = column_key(series)
    for entry, (keep, _) in list(cache.items()):
        held = keep if isinstance(keep, tuple) else (keep,)
        if any(isinstance(h, pd.Series) and column_key(h) == key for h in held):
            cache.pop(entry, None)


# Past this many finite values a column's distance tests and drill-down read a sample of it.
SAMPLE_ABOVE = 2_000_000
SAMPLE_SIZE = 1_000_000
# The sample's positions depend on the column's size alone: a window checked again gets the same
# score, and the columns of one window (all of them finite) share one draw.
SAMPLE_SEED = 21


@dataclass(frozen=True)
class SortedSample:
    """A column's finite values, sorted: all ``total`` of them, or a uniform random sample of
    them drawn without replacement."""

    values: np.ndarray
    total: int

    @property
    def sampled(self) -> bool:
        return self.values.size < self.total


def sorted_sample(series: pd.Series) -> SortedSample:
    """The column sorted (shared with ``sorted_finite``) while it has at most ``SAMPLE_ABOVE``
    finite values; past that, a uniform sample of ``SAMPLE_SIZE`` of them, sorted."""
    return memo(("sample",) + column_key(series), series, lambda: _sorted_sample(series))


def _sorted_sample(series: pd.Series) -> SortedSample:
    if len(series) > SAMPLE_ABOVE:
        finite = finite_values(series)
        if finite.size > SAMPLE_ABOVE:
            return SortedSample(np.sort(finite[shared_sample_positions(finite.size)]), finite.size)
    values = sorted_finite(series)
    return SortedSample(values, values.size)


def shared_sample_positions(total: int) -> np.ndarray:
    """``sample_positions(total)``, drawn once per check for every reader of a window of that size
    (the columns' distance tests, the PCA error's mean)."""
    return memo(("sample positions", total), None, lambda: sample_positions(total))


def sample_positions(total: int) -> np.ndarray:
    """``SAMPLE_SIZE`` distinct positions of ``total``, uniform, in order (a gather in order)."""
    positions = np.random.default_rng(SAMPLE_SEED).choice(total, SAMPLE_SIZE, replace=False)
    positions.sort()
    return positions


def _sorted_key(series: pd.Series) -> tuple[Any, ...]:
    return ("sorted",) + column_key(series)


def _sorted(series: pd.Series) -> np.ndarray:
    return np.sort(finite_values(series))


# Below this many rows a window's columns are worked on one after another: a thread pool's start
# costs about a millisecond, and evidently-parity runs call the engines thousands of times.
PARALLEL_MIN_ROWS = 50_000


def each_column(function: Callable[[K], T], names: Sequence[K], rows: int) -> list[T]:
    """``function(name)`` for every column (or block of rows), in order; on a thread per CPU when the window has
    ``PARALLEL_MIN_ROWS`` rows or more. Each call runs in a copy of the caller's context, so the
    memo of ``shared_sorts()`` is the same for all of them. numpy's sorts and ufuncs release the
    GIL: a 1M-row check's 20 Wasserstein tests (each a sort, a searchsorted and a pass over the
    merged values) took 1.3 s on one of this machine's two CPUs."""
    workers = min(len(names), len(os.sched_getaffinity(0)))
    if rows < PARALLEL_MIN_ROWS or workers < 2:
        return [function(name) for name in names]
    with ThreadPoolExecutor(workers) as pool:
        futures = [pool.submit(copy_context().run, function, name) for name in names]
        return [future.result() for future in futures]
