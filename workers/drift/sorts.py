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
"""

import os
from collections.abc import Callable, Hashable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from contextvars import ContextVar, copy_context
from typing import Any, TypeVar

import numpy as np
import pandas as pd

from workers.drift.summary import finite_values

T = TypeVar("T")

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
    """Drop the column's sorted values from the check's memo: its last reader is done (a later
    one sorts again). At 10M rows × 20 columns the kept sorted copies were 1.6 GB."""
    cache = _SHARED.get()
    if cache is not None:
        cache.pop(_sorted_key(series), None)


def _sorted_key(series: pd.Series) -> tuple[Any, ...]:
    return ("sorted",) + column_key(series)


def _sorted(series: pd.Series) -> np.ndarray:
    return np.sort(finite_values(series))


# Below this many rows a window's columns are worked on one after another: a thread pool's start
# costs about a millisecond, and evidently-parity runs call the engines thousands of times.
PARALLEL_MIN_ROWS = 50_000


def each_column(function: Callable[[str], T], names: Sequence[str], rows: int) -> list[T]:
    """``function(name)`` for every column, in order; on a thread per CPU when the window has
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
