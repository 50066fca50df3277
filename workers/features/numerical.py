"""The ``numerical`` feature type: a finite number (NaN and ±inf count as missing)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from workers.drift.distribution import (
    DistributionDict,
    edges_for,
    finite,
    fmt,
    fractions,
    psi,
    sorted_histogram,
)
from workers.drift.sorts import column_key, in_check, memo, release_sorted, sorted_finite, sorted_sample
from workers.drift.stats import (
    DISCRETE_MAX_UNIQUE,
    KS,
    WASSERSTEIN,
    SampleDict,
    StatTest,
    continuous_score,
    discrete_counts,
    discrete_score,
    discrete_stattest,
    large_reference,
    union_unique,
    wasserstein_norm,
    wasserstein_sample_error,
)
from workers.drift.summary import NumericalSummary, summarize_numerical
from workers.features.base import DriftScore, FeatureKind, InvalidValue
from workers.features.registry import register_feature_type


def _continuous(
    test: StatTest, summary: NumericalSummary, values: pd.Series, current: np.ndarray | None = None
) -> DriftScore | None:
    """``current``: the window's sorted finite values where the caller has them already."""
    if test is WASSERSTEIN:
        return _wasserstein_score(summary, values)  # a large window's sample: no full sort
    current = sorted_finite(values) if current is None else current
    if current.size == 0:
        return None
    return DriftScore(test, continuous_score(test, summary, current), current.size)


def _wasserstein_score(summary: NumericalSummary, values: pd.Series) -> DriftScore | None:
    score, n_current, sample = _wasserstein(summary, values)
    if summary.n == 0 or n_current == 0:
        return None
    return DriftScore(WASSERSTEIN, score, n_current, sample=sample)


def _wasserstein(summary: NumericalSummary, values: pd.Series) -> tuple[float, int, SampleDict | None]:
    """The drift test's and the drill-down's distance (and the window's count of finite values),
    computed once per check from the column sorted or, past ``SAMPLE_ABOVE`` values, from a sample
    of it, then with the sample and its stated error."""

    def compute() -> tuple[float, int, SampleDict | None]:
        current = sorted_sample(values)
        if summary.n == 0 or current.total == 0:
            return math.nan, current.total, None
        score = wasserstein_norm(summary.sorted_values, summary.std, current.values, presorted=True)
        if not current.sampled:
            return score, current.total, None
        error = wasserstein_sample_error(current.values, current.total, summary.std)
        return score, current.total, {"rows": int(current.values.size), "of": current.total, "error": error}

    return memo(("wasserstein", id(summary), *column_key(values)), (summary, values), compute)


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


class Numerical(FeatureKind[NumericalSummary]):
    name = "numerical"
    storage_dtype = "float64"
    encoding = "number"
    summary_arrays = ("",)
    array_prefix = "num"
    distribution_note = "values past the end bins are counted in them"
    order_free = True

    def clean(self, value: Any) -> Any:
        if type(value) is float:  # the common case first: 400,000 calls per 10,000-row batch
            return value if math.isfinite(value) else None
        if not is_number(value):
            raise self.wrong_type(value)
        return value if math.isfinite(value) else None

    def parse_text(self, text: str) -> Any:
        try:
            return float(text)
        except ValueError:
            raise InvalidValue(f"not a number: {text[:40]!r}") from None

    def column(self, values: pd.Series) -> pd.Series:
        return pd.to_numeric(values, errors="coerce").astype("float64")

    def summarize(self, values: pd.Series) -> NumericalSummary:
        return summarize_numerical(values)

    def summary_dump(self, summary: NumericalSummary) -> tuple[Any, dict[str, np.ndarray]]:
        return {"std": summary.std, "n_unique": summary.n_unique}, {"": summary.sorted_values}

    def summary_load(self, meta: Any, arrays: Mapping[str, np.ndarray]) -> NumericalSummary:
        return NumericalSummary(arrays[""], float(meta["std"]), int(meta["n_unique"]))

    def default_stattest(self, n_reference: int, n_unique: int) -> StatTest:
        # evidently 0.7.23: a numerical column with more than 5 values is continuous.
        if n_unique > DISCRETE_MAX_UNIQUE:
            return WASSERSTEIN if large_reference(n_reference) else KS
        return discrete_stattest(n_reference, n_unique)

    def drift(self, summary: NumericalSummary, values: pd.Series) -> DriftScore | None:
        scored = self._drift(summary, values)
        if in_check():
            # The drill-down is the column's other reader of its sorted values: made now, on
            # this column's thread, so the sorted copy is not kept for it (one per column).
            self.distribution(summary, values)
            release_sorted(values)
        return scored

    def _drift(self, summary: NumericalSummary, values: pd.Series) -> DriftScore | None:
        if summary.n == 0:
            return None
        if summary.n_unique > DISCRETE_MAX_UNIQUE:
            # Continuous: the reference alone already has > 5 values, no need to count the window.
            return _continuous(self.default_stattest(summary.n, summary.n_unique), summary, values)
        current = sorted_finite(values)
        if current.size == 0:
            return None
        ref_counts = summary.value_counts()
        cur_counts = discrete_counts(current)
        test = self.default_stattest(summary.n, union_unique(ref_counts, cur_counts))
        if test in (KS, WASSERSTEIN):
            return _continuous(test, summary, values, current)
        return DriftScore(test, discrete_score(test, ref_counts, cur_counts), current.size)

    def distribution(self, summary: NumericalSummary, values: pd.Series) -> DistributionDict | None:
        """Made once per check and column (by ``drift``, or here when it did not run)."""
        return memo(
            ("distribution", id(summary), *column_key(values)),
            (summary, values),
            lambda: self._distribution(summary, values),
        )

    def _distribution(self, summary: NumericalSummary, values: pd.Series) -> DistributionDict | None:
        # Past SAMPLE_ABOVE values the window's bars are a sample's (stated with the distance).
        window = sorted_sample(values)
        reference, current = summary.sorted_values, window.values
        if reference.size == 0 or current.size == 0:
            return None
        edges = edges_for(reference, current, presorted=True)
        ref_counts = sorted_histogram(reference, edges)
        cur_counts = sorted_histogram(current, edges)
        distance, _, sample = _wasserstein(summary, values)
        out: DistributionDict = {
            "column_type": self.name,
            "labels": [f"[{fmt(a)}, {fmt(b)})" for a, b in zip(edges[:-1], edges[1:], strict=True)],
            "edges": [float(e) for e in edges],
            "reference": fractions(ref_counts),
            "current": fractions(cur_counts),
            "n_reference": int(reference.size),
            "n_current": window.total,
            "psi": psi(ref_counts, cur_counts),
            "wasserstein_norm": finite(distance),
            "cramers_v": None,
        }
        if sample:
            out["sample"] = sample
        return out

    def missing(self, values: pd.Series) -> np.ndarray:
        # Unparsable strings count as missing too: a feed sending "n/a" in a number is broken.
        numbers = pd.to_numeric(values, errors="coerce").to_numpy(dtype="float64", na_value=np.nan)
        return ~np.isfinite(numbers)


NUMERICAL = register_feature_type(Numerical())
