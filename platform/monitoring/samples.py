"""Where a window's samples come from: the ``SampleSource`` protocol and its registry.

A source answers ``load(model=, window=, columns=)`` with the window's samples as columns
(``SampleColumns``: name → 1-d array), the labels joined in. The built-in one is the columnar
store's (``monitoring.store.source``: Arrow parts, labels from PostgreSQL or SQLite); another
store registers itself with ``register_sample_source`` and is chosen by
``DRIFTWATCH_SAMPLE_SOURCE``, with no change to the checks or the drift engine (which takes
columnar arrays as they are).
"""

import importlib
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Protocol

import numpy as np
import pandas as pd
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from registry.models import RegisteredModel
from registry.reference import LABEL
from workers.drift.summary import ColumnCounts

# The built-in sources' modules, imported on the first lookup (a fixed list, never a client's name).
BUILTIN_MODULES = ("monitoring.store.source",)


@dataclass(frozen=True)
class WindowBounds:
    """Which samples: start <= timestamp < end, or the last_n before end (with labelled_only, the
    last_n newest that have a label)."""

    start: datetime | None
    end: datetime
    last_n: int | None = None
    labelled_only: bool = False


@dataclass(frozen=True)
class DeferredFeatures:
    """Features of a window read when asked for, one at a time, rather than all held at once: a
    10M-row window's 20 float64 features are 1.5 GiB, and a check needs one (two on two CPUs)
    at a time, and a sample of rows for its PCA. ``read_column(name)`` reads the whole
    window's column, typed as the source types it (each call reads it again: the caller keeps
    it while it works on it); ``positions``: the window's rows that this one holds (a segment)."""

    names: tuple[str, ...]
    read_column: Callable[[str], Any]
    positions: np.ndarray | None = None
    # The feature as a pandas Categorical of its typed distinct values, for a source that holds
    # it dictionary-encoded (the PCA's frequency encoding then looks each distinct value up once,
    # on its codes); None (or no reader) where it cannot: the caller reads the column.
    read_category: Callable[[str], Any] | None = None
    # Some rows of the whole window's column (a slice, or positions in any order), typed as
    # ``read_column`` types them, reading no other row: for the features in ``sliced`` (those
    # the source can type apart from their column).
    read_at: Callable[[str, slice | np.ndarray], Any] | None = None
    sliced: frozenset[str] = frozenset()

    def read(self, name: str) -> Any:
        if self.positions is not None and self.read_at is not None and name in self.sliced:
            return self.read_at(name, self.positions)  # only this window's rows are read
        values = self.read_column(name)
        return values if self.positions is None else values[self.positions]

    def reads_rows(self, names: Sequence[str]) -> bool:
        """Whether ``read_rows`` reads only the rows asked for of each of these features."""
        return self.read_at is not None and self.sliced.issuperset(names)

    def read_rows(self, name: str, start: int, stop: int) -> Any:
        """Rows [start, stop) of this window's feature: only those read, where the source can;
        else the column read whole, then cut."""
        if self.read_at is not None and name in self.sliced:
            return self.read_at(
                name, slice(start, stop) if self.positions is None else self.positions[start:stop]
            )
        return self.read(name)[start:stop]

    def category(self, name: str) -> Any:
        """``read_category(name)`` of these rows, or None."""
        values = None if self.read_category is None else self.read_category(name)
        return values if values is None or self.positions is None else values[self.positions]

    def rows(self, positions: np.ndarray) -> "DeferredFeatures":
        """These rows (positions in this window) of the same features."""
        return replace(self, positions=positions if self.positions is None else self.positions[positions])


@dataclass(frozen=True)
class SampleColumns:
    """One window as columns of equal length: the features (typed as their feature types say),
    PREDICTION, PROBA_PREFIX + class, LABEL (None where unlabelled) and the window columns
    (sample_id, version_id, timestamp and label_received_at, both time-zone aware).

    Arrays are numpy arrays, or pandas extension arrays where numpy has no such dtype (aware
    datetimes) or where a source holds the values in Arrow already (the columnar source's
    sample ids)."""

    arrays: dict[str, Any]
    # Features not in ``arrays``, read on demand (a source may defer them for a large window).
    deferred: DeferredFeatures | None = None
    # Counted features' counts over the whole window, from per-hour summaries (a source may
    # give them for a window of whole hours when asked: ``counted``); such a feature is
    # deferred, read only if a test needs its values.
    counts: dict[str, ColumnCounts] = field(default_factory=dict)

    @property
    def labels(self) -> Any:
        return self.arrays[LABEL]

    def __len__(self) -> int:
        return len(next(iter(self.arrays.values()))) if self.arrays else 0

    def to_frame(self) -> pd.DataFrame:
        """The columns as a DataFrame, without copying them."""
        return pd.DataFrame(self.arrays, copy=False)


class SampleSource(Protocol):
    def load(
        self,
        *,
        model: RegisteredModel,
        window: WindowBounds,
        columns: Sequence[str] | None = None,
        defer_above: int | None = None,
        counted: bool = False,
    ) -> SampleColumns:
        """The window's samples with their labels; ``columns``: the features to read (None: all).
        ``defer_above``: a window of more rows than that may hand its features over as
        ``deferred`` (read on demand) instead of in ``arrays``; ``counted``: the source may give
        counted features as their ``counts`` (deferred too). A source may ignore either."""
        ...


_SOURCES: dict[str, Callable[[], SampleSource]] = {}
# Sources this release no longer has, with what to do instead.
RETIRED_SOURCES = {
    "relational": (
        "; the relational store's JSON rows were retired (migration monitoring 0031): unset it, "
        "and move samples still stored there with `python manage.py samples_to_columnar`"
    ),
}


def register_sample_source(name: str, factory: Callable[[], SampleSource]) -> None:
    """Add a source under ``name`` (``DRIFTWATCH_SAMPLE_SOURCE`` picks one)."""
    _SOURCES[name] = factory


def sample_source(name: str | None = None) -> SampleSource:
    """The configured source (or the one called ``name``); an unknown name is a config error."""
    for module in BUILTIN_MODULES:
        importlib.import_module(module)
    chosen = name or settings.DRIFTWATCH_SAMPLE_SOURCE
    factory = _SOURCES.get(chosen)
    if factory is None:
        gone = RETIRED_SOURCES.get(chosen, "")
        raise ImproperlyConfigured(
            f"DRIFTWATCH_SAMPLE_SOURCE={chosen!r} is not a sample source (known: {sorted(_SOURCES)}){gone}"
        )
    return factory()


def source_load(
    source: SampleSource,
    *,
    model: RegisteredModel,
    window: WindowBounds,
    columns: Sequence[str] | None = None,
    defer_above: int | None = None,
    counted: bool = False,
    labels: Any = None,
) -> SampleColumns:
    """``source.load``; ``defer_above``, ``counted`` and ``labels`` only to a source whose
    ``load`` takes them (one written before they existed loads every feature, as it always did,
    and reads the window's labels itself)."""
    takes = inspect.signature(source.load).parameters
    options: dict[str, Any] = {}
    if defer_above is not None and "defer_above" in takes:
        options["defer_above"] = defer_above
    if counted and "counted" in takes:
        options["counted"] = counted
    if labels is not None and "labels" in takes:
        options["labels"] = labels
    return source.load(model=model, window=window, columns=columns, **options)
