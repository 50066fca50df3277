"""The ``categorical`` feature type: a label, sent as a string (integers and booleans become
their string form); the reference's categories are the schema its data-quality rule holds to."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import pandas as pd

from workers.drift.distribution import OTHER, TOP_CATEGORIES, DistributionDict, cramers_v, psi
from workers.drift.sorts import column_key, memo
from workers.drift.stats import StatTest, discrete_score, discrete_stattest, union_unique
from workers.drift.summary import (
    CategoricalSummary,
    ColumnCounts,
    category_counts,
    counts_from_json,
    counts_to_json,
)
from workers.features.base import DriftScore, FeatureKind, InvalidValue
from workers.features.registry import register_feature_type

# Category values are labels, not documents: longer ones are refused (and would bloat every window).
MAX_CATEGORY_CHARS = 1000
_EXAMPLES = 5  # out-of-schema values reported per column


def _counts(values: pd.Series) -> dict[Any, int]:
    """The window's counts per category, counted once per check for the drift test and the
    drill-down (read, never changed, by both)."""
    return memo(("category_counts", *column_key(values)), values, lambda: category_counts(values))


class Categorical(FeatureKind[CategoricalSummary]):
    name = "categorical"
    storage_dtype = "object"
    encoding = "category"

    def clean(self, value: Any) -> Any:
        if isinstance(value, str):
            if len(value) > MAX_CATEGORY_CHARS:
                raise InvalidValue(f"at most {MAX_CATEGORY_CHARS} characters")
            return value
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, int):
            return str(value)
        raise self.wrong_type(value)

    def parse_text(self, text: str) -> Any:
        return text

    elementwise_column = True

    def column(self, values: pd.Series) -> pd.Series:
        return values.astype("object").where(values.notna(), None)

    def summarize(self, values: pd.Series) -> CategoricalSummary:
        return CategoricalSummary(category_counts(values))

    def summary_dump(self, summary: CategoricalSummary) -> tuple[Any, dict[str, np.ndarray]]:
        return counts_to_json(summary.counts), {}

    def summary_load(self, meta: Any, arrays: Mapping[str, np.ndarray]) -> CategoricalSummary:
        return CategoricalSummary(counts_from_json(meta))

    def allowed_values(self, summary: CategoricalSummary) -> list[Any] | None:
        return list(summary.counts)

    def default_stattest(self, n_reference: int, n_unique: int) -> StatTest:
        return discrete_stattest(n_reference, n_unique)

    counted = True

    def counted_values(self, values: pd.Series) -> ColumnCounts:
        return ColumnCounts(_counts(values), int(self.missing(values).sum()))

    def drift(self, summary: CategoricalSummary, values: pd.Series) -> DriftScore | None:
        return self.drift_counted(summary, ColumnCounts(_counts(values), 0))

    def drift_counted(self, summary: CategoricalSummary, counted: ColumnCounts) -> DriftScore | None:
        cur_counts = counted.counts
        if summary.n == 0 or not cur_counts:
            return None
        test = self.default_stattest(summary.n, union_unique(summary.counts, cur_counts))
        return DriftScore(test, discrete_score(test, summary.counts, cur_counts), sum(cur_counts.values()))

    def distribution(self, summary: CategoricalSummary, values: pd.Series) -> DistributionDict | None:
        return self.distribution_counted(summary, ColumnCounts(_counts(values), 0))

    def distribution_counted(
        self, summary: CategoricalSummary, counted: ColumnCounts
    ) -> DistributionDict | None:
        reference, current = summary.counts, counted.counts
        if not reference or not current:
            return None
        keys = sorted(
            set(reference) | set(current), key=lambda k: (-reference.get(k, 0), -current.get(k, 0), str(k))
        )
        ref_counts = np.array([reference.get(k, 0) for k in keys], dtype=float)
        cur_counts = np.array([current.get(k, 0) for k in keys], dtype=float)
        shown = keys[:TOP_CATEGORIES]
        labels = [str(k) for k in shown]
        ref_bars, cur_bars = ref_counts[: len(shown)], cur_counts[: len(shown)]
        if len(keys) > len(shown):
            labels.append(OTHER)
            ref_bars = np.append(ref_bars, ref_counts[len(shown) :].sum())
            cur_bars = np.append(cur_bars, cur_counts[len(shown) :].sum())
        return {
            "column_type": self.name,
            "labels": labels,
            "edges": [],
            "reference": [c / ref_counts.sum() for c in ref_bars.tolist()],
            "current": [c / cur_counts.sum() for c in cur_bars.tolist()],
            "n_reference": int(ref_counts.sum()),
            "n_current": int(cur_counts.sum()),
            "psi": psi(ref_counts, cur_counts),
            "wasserstein_norm": None,
            "cramers_v": cramers_v(ref_counts, cur_counts),
        }

    def missing(self, values: pd.Series) -> np.ndarray:
        return np.asarray((values.isna() | values.isin([np.inf, -np.inf])).to_numpy())

    def quality(
        self, values: pd.Series, missing: np.ndarray, allowed: Iterable[Any] | None, n: int
    ) -> dict[str, Any]:
        """The share of values the reference never saw (only with the reference's categories)."""
        if allowed is None:
            return {}
        return self.quality_counted(ColumnCounts(_counts(values), int(missing.sum())), allowed, n)

    def quality_counted(self, counted: ColumnCounts, allowed: Iterable[Any] | None, n: int) -> dict[str, Any]:
        """Out of schema: the counts of values not in ``allowed``; the examples are the first
        of them in row order (the counts' keys are in the order of their first row)."""
        if allowed is None:
            return {}
        known = set(allowed)
        outside = [key for key in counted.counts if key not in known]
        count = sum(counted.counts[key] for key in outside)
        return {
            "out_of_schema_count": count,
            "out_of_schema_share": count / n if n else None,
            "out_of_schema_examples": outside[:_EXAMPLES],
        }


CATEGORICAL = register_feature_type(Categorical())
