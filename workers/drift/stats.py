"""The statistical tests evidently 0.7.23 selects by default, computed from a reference summary.

Each function mirrors one evidently stattest (module named in its docstring) operation for
operation, so scores agree to floating-point rounding; the difference is that the reference
side comes pre-sorted / pre-counted from a ``ReferenceSummary`` instead of being recomputed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict

import numpy as np

if TYPE_CHECKING:
    from workers.drift.summary import NumericalSummary


@dataclass(frozen=True)
class StatTest:
    """A stattest as evidently registers it: short name, display name, default threshold."""

    name: str
    display_name: str
    threshold: float
    higher_is_drift: bool  # distances drift when >= threshold; p-values when <= / < threshold
    inclusive: bool = True  # KS `<=`, chi-square and z `<`; distances `>=`, evidently's embedding model `>`

    def drifted(self, score: float, threshold: float) -> bool:
        if np.isnan(score):
            return False  # evidently: every comparison with NaN is False
        if self.higher_is_drift:
            return bool(score >= threshold) if self.inclusive else bool(score > threshold)
        return bool(score <= threshold) if self.inclusive else bool(score < threshold)


KS = StatTest("ks", "K-S p_value", 0.05, higher_is_drift=False, inclusive=True)
CHI_SQUARE = StatTest("chisquare", "chi-square p_value", 0.05, higher_is_drift=False, inclusive=False)
Z = StatTest("z", "Z-test p_value", 0.05, higher_is_drift=False, inclusive=False)
JENSEN_SHANNON = StatTest("jensenshannon", "Jensen-Shannon distance", 0.1, higher_is_drift=True)
WASSERSTEIN = StatTest("wasserstein", "Wasserstein distance (normed)", 0.1, higher_is_drift=True)
STATTESTS: dict[str, StatTest] = {t.name: t for t in (KS, CHI_SQUARE, Z, JENSEN_SHANNON, WASSERSTEIN)}

# evidently's _get_default_stattest: "small" references have at most this many non-missing rows.
SMALL_REFERENCE_MAX_ROWS = 1000
# ... and a numerical column with at most this many distinct values (reference ∪ current) is
# treated as discrete.
DISCRETE_MAX_UNIQUE = 5
# ... and at most this many distinct values is binary (z-test instead of chi-square).
BINARY_MAX_UNIQUE = 2


def large_reference(n_reference: int) -> bool:
    """evidently: a reference with more than 1,000 non-missing rows takes the distance tests."""
    return n_reference > SMALL_REFERENCE_MAX_ROWS


def discrete_stattest(n_reference: int, n_unique: int) -> StatTest:
    """evidently 0.7.23's choice for a discrete column (categorical, or numerical with at most
    5 values): Jensen-Shannon on a large reference, else chi-square (z-test when binary)."""
    if large_reference(n_reference):
        return JENSEN_SHANNON
    return CHI_SQUARE if n_unique > BINARY_MAX_UNIQUE else Z


def default_stattest(column_type: str, n_reference: int, n_unique: int) -> StatTest:
    """evidently 0.7.23 ``_get_default_stattest``, as the column's feature type declares it.

    ``n_reference`` is the non-missing reference row count; ``n_unique`` the number of distinct
    non-missing values in reference and current together.
    """
    from workers.features.registry import feature_type  # the types import this module

    return feature_type(column_type).default_stattest(n_reference, n_unique)


def discrete_counts(values: np.ndarray) -> dict[Any, int]:
    uniques, counts = np.unique(values, return_counts=True)
    return {u.item(): int(c) for u, c in zip(uniques, counts, strict=True)}


def union_unique(reference: dict[Any, int], current: dict[Any, int]) -> int:
    return len(set(reference) | set(current))


def continuous_score(test: StatTest, summary: NumericalSummary, current: np.ndarray) -> float:
    """KS p-value or normalised Wasserstein distance of the window against a numerical summary."""
    if test is KS:
        return ks_pvalue(summary.sorted_values, current)
    return wasserstein_norm(summary.sorted_values, summary.std, current)


def discrete_score(test: StatTest, ref_counts: dict[Any, int], cur_counts: dict[Any, int]) -> float:
    """The score of a test on per-value counts (chi-square, z or Jensen-Shannon)."""
    return DISCRETE_SCORERS[test.name](ref_counts, cur_counts)


def ks_pvalue(reference_sorted: np.ndarray, current: np.ndarray) -> float:
    """evidently ``ks_stattest``: scipy's two-sided two-sample KS p-value (method "auto")."""
    from scipy import stats  # here, not at the top: scipy.stats is a second of every process's start

    return float(stats.ks_2samp(reference_sorted, current).pvalue)


def wasserstein_norm(
    reference_sorted: np.ndarray, reference_std: float, current: np.ndarray, *, presorted: bool = False
) -> float:
    """evidently ``wasserstein_distance_norm``: W1(reference, current) / max(std(reference), 0.001)."""
    current_sorted = current if presorted else np.sort(current)
    return wasserstein_sorted(reference_sorted, current_sorted) / max(reference_std, 0.001)


class SampleDict(TypedDict):
    """A score made from a uniform random sample (without replacement) of the window's values:
    ``rows`` of its ``of``; ``error`` is the score's stated error, a bound on its expected
    absolute difference from the score of all ``of`` values."""

    rows: int
    of: int
    error: float


def wasserstein_sample_error(sample_sorted: np.ndarray, total: int, reference_std: float) -> float:
    """The stated error of ``wasserstein_norm`` taken on a uniform sample S of m of a column's N
    values C instead of all of them (R the reference):

    |W1(S, R) - W1(C, R)| <= W1(S, C) = ∫ |F_S - F_C| dx (the triangle inequality), and for each x
    F_S(x) is the share of a sample without replacement, so E|F_S(x) - F_C(x)| <= its standard
    deviation, sqrt(F_C (1 - F_C) / m · (N - m) / (N - 1)). Hence
    E|error| <= sqrt((N - m) / (m (N - 1))) · ∫ sqrt(F_C (1 - F_C)) dx, divided by the score's
    norm, max(std(R), 0.001). The integral is read off the sorted sample (F_S for F_C)."""
    m = sample_sorted.size
    if m < 2 or total <= m:
        return 0.0
    shares = np.arange(1, m, dtype="float64") / m  # F_S on each gap between sorted values
    spread = float(np.dot(np.diff(sample_sorted), np.sqrt(shares * (1 - shares))))
    return float(np.sqrt((total - m) / (m * (total - 1))) * spread / max(reference_std, 0.001))


# Steps of the smaller sample per block: the block's repeated values stay a few MB.
W1_BLOCK = 1 << 16


def wasserstein_sorted(a: np.ndarray, b: np.ndarray) -> float:
    """W1 between the empirical distributions of two sorted samples: the integral over u of
    |F_a⁻¹(u) - F_b⁻¹(u)|, equal to the integral of |F_a - F_b| over x that scipy's
    ``wasserstein_distance`` (and so evidently) computes. With b the larger sample (m ≥ n
    values), in units of 1/(n·m) b's quantile step l runs from l·n to l·n + n and a's step i
    from i·m to i·m + m: each step of b lies in one step of a, but for the one that an a
    boundary k·m cuts (n ≤ m: at most one boundary a step). So W1·n·m is n·Σ |a[i(l)] - b[l]|
    (a repeated over the b steps that start in its step: one pass over b) plus, for each cut
    step, its part past the boundary moved from a[k-1] to a[k]. A 1M-row window against a
    100,000-row reference: 41 ms merging the two, 15 ms by b's steps, about 7 by a's."""
    if len(a) > len(b):
        a, b = b, a
    n, m = len(a), len(b)
    starts = -((-np.arange(n + 1, dtype="int64") * m) // n)  # first b step starting in a's step i
    total = 0.0
    for first in range(0, n, W1_BLOCK):
        last = min(first + W1_BLOCK, n)
        values = np.repeat(a[first:last], np.diff(starts[first : last + 1]))
        np.subtract(values, b[starts[first] : starts[last]], out=values)
        total += float(np.abs(values, out=values).sum()) * n
    bounds = np.arange(1, n, dtype="int64") * m  # a's inner boundaries k·m, k = 1..n-1
    step, into = np.divmod(bounds, n)
    cut = into > 0  # the boundary falls inside b's step, not on its start
    k, step, past = np.flatnonzero(cut) + 1, step[cut], (n - into[cut]).astype("float64")
    total += float(np.dot(past, np.abs(a[k] - b[step]) - np.abs(a[k - 1] - b[step])))
    return total / n / m


def _aligned_counts(
    reference_counts: dict[Any, int], current_counts: dict[Any, int]
) -> tuple[list[Any], np.ndarray, np.ndarray]:
    # evidently: keys = set(ref) | set(cur), categories absent on one side count 0.
    keys = list(set(reference_counts) | set(current_counts))
    ref = np.array([reference_counts.get(k, 0) for k in keys], dtype="float64")
    cur = np.array([current_counts.get(k, 0) for k in keys], dtype="float64")
    return keys, ref, cur


def chi_square_pvalue(reference_counts: dict[Any, int], current_counts: dict[Any, int]) -> float:
    """evidently ``chisquare_stattest``: expected = reference counts scaled to the current size.

    A category absent from the reference has expected count 0, so the statistic is infinite
    and the p-value 0 (scipy warns about the division): evidently does exactly this.
    """
    _, ref, cur = _aligned_counts(reference_counts, current_counts)
    f_exp = ref * (cur.sum() / ref.sum())
    with np.errstate(divide="ignore", invalid="ignore"):
        from scipy import stats

        return float(stats.chisquare(cur, f_exp)[1])


def z_pvalue(reference_counts: dict[Any, int], current_counts: dict[Any, int]) -> float:
    """evidently ``z_stattest``: two-proportion z-test on "is not the smallest value"."""
    if (
        len(reference_counts) == 1
        and len(current_counts) == 1
        and reference_counts.keys() == current_counts.keys()
    ):
        return 1.0
    first = sorted(set(reference_counts) | set(current_counts))[0]
    n1, n2 = sum(reference_counts.values()), sum(current_counts.values())
    p1 = float(n1 - reference_counts.get(first, 0)) / n1
    p2 = float(n2 - current_counts.get(first, 0)) / n2
    pooled = float(p1 * n1 + p2 * n2) / (n1 + n2)
    with np.errstate(divide="ignore", invalid="ignore"):
        z = (p1 - p2) / np.sqrt(pooled * (1 - pooled) * (1.0 / n1 + 1.0 / n2))
    # scipy.stats.norm.cdf is scipy.special.ndtr behind argument checks (the same value for any
    # z, inf and NaN included); scipy.stats' import cost a process's first check 0.6–1.1 s.
    from scipy.special import ndtr

    return float(2 * (1 - ndtr(np.abs(z))))


def jensen_shannon(reference_counts: dict[Any, int], current_counts: dict[Any, int]) -> float:
    """evidently ``jensenshannon``: JS distance (natural log) between category frequencies.

    Under the default selection this test only meets discrete columns (categorical, or
    numerical with at most 5 values), i.e. evidently's per-value branch of ``get_binned_data``,
    never its Sturges-histogram branch (which needs more than 20 reference values).
    """
    _, ref, cur = _aligned_counts(reference_counts, current_counts)
    from scipy.spatial import distance

    return float(distance.jensenshannon(ref / ref.sum(), cur / cur.sum()))


DISCRETE_SCORERS: dict[str, Callable[[dict[Any, int], dict[Any, int]], float]] = {
    CHI_SQUARE.name: chi_square_pvalue,
    Z.name: z_pvalue,
    JENSEN_SHANNON.name: jensen_shannon,
}
