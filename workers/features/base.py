"""What a feature type declares: one subclass of ``FeatureKind`` per type, in its own module.

Every place that handles a feature value asks its type: ingestion (``clean``, ``parse_text``),
the stored column (``storage_dtype``, ``column``), the reference summary (``summarize`` and its
serialised form), the default drift test and its score (``default_stattest``, ``drift``), the
drill-down's distribution, the data-quality rules (``missing``, ``quality``) and how models that
take numbers see the column (``encoding``). No Django imports.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    from workers.drift.distribution import DistributionDict
    from workers.drift.stats import SampleDict, StatTest
    from workers.drift.summary import ColumnCounts

S = TypeVar("S")  # the type's reference summary of one column

# How models that take a matrix of numbers see a column (multivariate PCA, DLE's regressor, the
# tabular training encoder): as a number (standardised), as a category (frequency-encoded,
# one-hot), or not at all (None: those models leave the column out, training refuses it).
Encoding = Literal["number", "category"]


# A feature option: "refuse" (the type's default where it lists the option) or "allow" (a null
# value is stored as missing and reported as the data-quality section's missing share).
MISSING = "missing"
MISSING_CHOICES = ("refuse", "allow")


def missing_option_errors(spec: Mapping[str, Any]) -> dict[str, str]:
    """The ``missing`` option's error, by option name (none when absent or valid)."""
    if MISSING in spec and spec[MISSING] not in MISSING_CHOICES:
        return {MISSING: f"must be one of {', '.join(MISSING_CHOICES)}"}
    return {}


def missing_allowed(spec: Mapping[str, Any]) -> bool:
    return spec.get(MISSING) == "allow"


class InvalidValue(ValueError):
    """A value its type refuses; ``message`` is what the API returns for that row and field."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True)
class DriftScore:
    """A column's drift test and its score against the reference (the decision is the test's)."""

    test: StatTest
    score: float
    n_current: int
    threshold: float | None = None  # None: the test's own; a method may derive it from the data
    sample: SampleDict | None = None  # the score was made from a sample of the window's values


class FeatureKind(ABC, Generic[S]):
    """One feature type. Subclass it, set the class attributes, and ``register_feature_type``."""

    name: str
    storage_dtype: str  # the column's dtype in a loaded window and a reference frame
    encoding: Encoding | None
    summary_arrays: tuple[str, ...] = ()  # the numpy arrays its summary stores, by suffix
    array_prefix: str = ""  # stored arrays are named f"{array_prefix}{suffix}:{column}"
    distribution_note: str | None = None  # shown under the drill-down's bars
    options: tuple[str, ...] = ()  # keys a feature of this type takes beside name and type
    # False: a null value is refused at ingest, naming row and field. A type that refuses them
    # may list MISSING in ``options`` and bind ``missing_allowed(spec)`` (a feature's own choice).
    allows_missing = True
    # True: ``column`` types each value on its own, whatever the others are, so a source may
    # type a column's distinct values once and spread them over its rows.
    elementwise_column = False

    # -- the feature's options (e.g. an embedding's dim)
    def option_errors(self, spec: Mapping[str, Any]) -> dict[str, str]:
        """What is wrong with a registered feature's options, by option name."""
        return {}

    def bind(self, spec: Mapping[str, Any]) -> FeatureKind[S]:
        """The type as one feature with these options sees it (default: the type itself)."""
        return self

    def split_columns(self, name: str) -> list[str]:
        """The CSV columns a value may also arrive split into (default: none)."""
        return []

    def parse_cells(self, cells: list[str]) -> Any:
        """The ``split_columns`` cells of one row → the JSON value ``clean`` checks."""
        raise InvalidValue(f"{self.name} values arrive in one column")

    # -- ingestion
    @abstractmethod
    def clean(self, value: Any) -> Any:
        """A non-null JSON value → the value stored (None: counts as missing); raises
        ``InvalidValue`` with the message the API returns for the row and field."""

    @abstractmethod
    def parse_text(self, text: str) -> Any:
        """One non-empty CSV cell → the JSON value ``clean`` then checks; ``InvalidValue``."""

    def wrong_type(self, value: Any) -> InvalidValue:
        return InvalidValue(f"{self.name} feature got {type(value).__name__}")

    # -- storage
    @abstractmethod
    def column(self, values: pd.Series) -> pd.Series:
        """Stored or loaded values (any dtype, missing as None/NaN) → the typed column."""

    @property
    def vector_dim(self) -> int | None:
        """The length of every value when each is a list of numbers loaded as one float32 row
        (a source may then read the column as a matrix); None for any other type."""
        return None

    # -- reference summary
    @abstractmethod
    def summarize(self, values: pd.Series) -> S:
        """Everything the drift test and the distribution need from the reference column."""

    @abstractmethod
    def summary_dump(self, summary: S) -> tuple[Any, dict[str, np.ndarray]]:
        """(JSON metadata, arrays by suffix in ``summary_arrays``): no pickle."""

    @abstractmethod
    def summary_load(self, meta: Any, arrays: Mapping[str, np.ndarray]) -> S:
        """The inverse of ``summary_dump``."""

    def allowed_values(self, summary: S) -> list[Any] | None:
        """The values the reference says are in the schema (None: the type has no such list)."""
        return None

    # -- drift
    @abstractmethod
    def default_stattest(self, n_reference: int, n_unique: int) -> StatTest:
        """evidently's choice rule for this type (non-missing reference rows, distinct values
        in reference and window together)."""

    @abstractmethod
    def drift(self, summary: S, values: pd.Series) -> DriftScore | None:
        """The default test's score of the window's column; None when either side has no
        non-missing value (the column is then reported as not tested)."""

    def methods(self) -> tuple[str, ...]:
        """The drift methods a policy may choose for this type (none: only the default)."""
        return ()

    def drift_by(self, method: str, summary: S, values: pd.Series) -> DriftScore | None:
        """``drift`` by one of ``methods()``."""
        raise ValueError(f"{self.name} features have no drift method {method!r}")

    def descriptor_drift(self, summary: S, values: pd.Series) -> dict[str, DriftScore | None]:
        """Scores of values derived from the column (a text's length, ...), tested beside the
        column's own decision and stored under ``drift["descriptors"][column]`` (default: none)."""
        return {}

    @abstractmethod
    def distribution(self, summary: S, values: pd.Series) -> DistributionDict | None:
        """Reference vs window for the drill-down; None when either side is empty."""

    # -- data quality
    @abstractmethod
    def missing(self, values: pd.Series) -> np.ndarray:
        """A boolean mask of the window's values that count as missing."""

    def quality(
        self, values: pd.Series, missing: np.ndarray, allowed: Iterable[Any] | None, n: int
    ) -> dict[str, Any]:
        """Findings beyond the missing share (e.g. out-of-schema values), merged into the column's."""
        return {}

    # True: the type's drift, drill-down and data quality read the column's values in any order
    # (a numerical column: sorted, counted); a fanned-out check hands them the slices' sorted
    # values merged, not the column in row order (monitoring.fanout).
    order_free = False

    # -- counted: a type whose drift, drill-down and data quality are functions of the window's
    # per-value counts alone sets ``counted`` and the methods below. The columnar store then
    # writes each compacted hour's counts (``counted_values``) beside its part, and a window of
    # whole hours is checked on their merge (``ColumnCounts``) without reading the column.
    counted = False

    def counted_values(self, values: pd.Series) -> ColumnCounts:
        """The column's counts, as its ``drift``, ``distribution`` and ``quality`` count it."""
        raise NotImplementedError(f"{self.name} features are not counted")

    def drift_counted(self, summary: S, counted: ColumnCounts) -> DriftScore | None:
        """``drift`` of the window these counts are of."""
        raise NotImplementedError(f"{self.name} features are not counted")

    def distribution_counted(self, summary: S, counted: ColumnCounts) -> DistributionDict | None:
        """``distribution`` of the window these counts are of."""
        raise NotImplementedError(f"{self.name} features are not counted")

    def quality_counted(self, counted: ColumnCounts, allowed: Iterable[Any] | None, n: int) -> dict[str, Any]:
        """``quality`` of the window these counts are of."""
        raise NotImplementedError(f"{self.name} features are not counted")
