"""One sort of a window's column per check, shared by the tests that need it sorted.

Wasserstein, the drill-down's quantile edges and histogram, and KS each sorted the same
1,000,000 values again (four sorts or partitions per numerical column: 15 of a 1M-row check's
CPU seconds went to ``ndarray.sort``). Inside ``shared_sorts()`` (a check wraps its computation
in it) ``sorted_finite`` sorts a column once and hands the same sorted array to every later
caller of the same column; outside it, every call sorts.

A column is known by its buffer (address, shape, strides, dtype), and the cache holds the
column itself while the context lasts, so no other array can take that address meanwhile.
"""

import os
from collections.abc import Callable, Hashable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from contextvars import ContextVar
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


def _sorted_key(series: pd.Series) -> tuple[Any, ...]:
    return ("sorted",) + column_key(series)


def _sorted(series: pd.Series) -> np.ndarray:
    return np.sort(finite_values(series))


def presort(columns: Iterable[pd.Series]) -> None:
    """Sort these columns for ``sorted_finite`` on a thread per CPU, ahead of the tests that ask
    for them. numpy's sort releases the GIL: a 1M-row check's 20 sorts took 1.34 s on one of
    this machine's two CPUs, 0.72 s on both. Outside ``shared_sorts()``, nothing to keep them in."""
    cache = _SHARED.get()
    if cache is None:
        return
    todo = {_sorted_key(c): c for c in columns}
    todo = {key: c for key, c in todo.items() if key not in cache}
    if len(todo) < 2:
        return
    with ThreadPoolExecutor(min(len(todo), len(os.sched_getaffinity(0)))) as pool:
        done = pool.map(_sorted, todo.values())
        for (key, column), values in zip(todo.items(), done, strict=True):
            cache[key] = (column, values)
