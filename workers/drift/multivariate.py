"""Multivariate data drift: PCA reconstruction error against the reference (as NannyML's).

The features are standardised (categories frequency-encoded first, as their types' ``encoding`` says), projected on the
principal components that keep VARIANCE_KEPT of the reference's variance and mapped back; a
row's error is the distance to its reconstruction. The components encode how the features
move together, so a change in their relation (a correlation that flips) raises the error while
every marginal, and so every univariate test, stays the same. The alarm band is the reference's
mean error ± THRESHOLD_SD standard errors of the difference between a window's mean error and
the reference's: for each side the larger of the per-row sd over sqrt(rows) and the sd of the
mean over reference chunks rescaled to those rows (which keeps any dependence between
neighbouring rows in the band).

The reference's errors are measured out of sample: the PCA is fitted on the even chunks of the
reference (CHUNKS contiguous chunks) and the reference's error is that same PCA's on the odd
chunks. Scored by the PCA fitted on themselves, the rows' errors are lower than any new
window's (the components fit the reference's own noise): with 20 independent features and
5,000 reference rows the in-sample mean error was 2.47 and every clean window's 2.55, so a clean
window of 5,000 rows or more always alarmed. Scoring held-out chunks with PCAs fitted on the
other chunks (cross-fitting) removes that bias but measures other PCAs than the one that scores
the window, and on independent features their errors differ by more than the band allows
(4 alarms in 36 clean 100,000-row windows). And the reference's mean is itself an estimate: a
window far larger than the reference is compared with it within the held-out rows' standard
error, not its own alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NotRequired, TypedDict

import numpy as np
import pandas as pd

from workers.drift import sorts
from workers.drift.sorts import each_column, shared_sample_positions
from workers.drift.stats import SampleDict
from workers.features.registry import feature_type

VARIANCE_KEPT = 0.65  # NannyML's default
THRESHOLD_SD = 3.0
CHUNKS = 10
MIN_REFERENCE_ROWS = 100
ERROR_BLOCK_ROWS = 16_384  # a block's temporaries stay in cache: 16,384 × 20 float64 = 2.6 MB


@dataclass(frozen=True)
class PcaDrift:
    columns: list[str]
    frequencies: dict[str, dict[str, float]]  # categorical column -> value -> reference share
    means: np.ndarray
    scales: np.ndarray
    components: np.ndarray  # k x d, orthonormal rows
    reference_error: float  # mean out-of-sample reconstruction error on the reference
    row_sd: float  # sd of one row's error on the reference
    chunk_sd: float  # sd of the mean error over reference chunks
    chunk_rows: int
    reference_rows: int  # the held-out rows the reference error is measured on

    def errors(self, frame: pd.DataFrame, rows: np.ndarray | None = None) -> np.ndarray:
        """Each row's reconstruction error, ``ERROR_BLOCK_ROWS`` rows at a time: the whole
        window at once made each of its temporaries a 160 MB pass over memory at 1M × 20
        (1.0 s against 0.3 s in blocks, the same values). Each column is encoded once (a
        float64 column is its own array), and a large window's blocks run on a thread per CPU
        (numpy releases the GIL): a block per pandas slice of 20 columns was 4.8 s at 10M rows.
        ``rows``: only those rows' errors (positions in the frame)."""
        columns = [_encoded(_rows(frame[name], rows), self.frequencies.get(name)) for name in self.columns]
        n = len(columns[0]) if columns else 0
        out = np.empty(n)

        def block(start: int) -> None:
            stop = min(start + ERROR_BLOCK_ROWS, n)
            raw = np.empty((len(columns), stop - start))
            for j, values in enumerate(columns):
                raw[j] = values[start:stop]
            out[start:stop] = _errors(np.ascontiguousarray(raw.T), self.means, self.scales, self.components)

        each_column(block, range(0, n, ERROR_BLOCK_ROWS), n)
        return out

    def band(self, n: int, sampling_variance: float = 0.0) -> tuple[float, float]:
        """The alarm band for a window of n rows (its mean error taken on a sample of them: that
        mean's own sampling variance added)."""
        variance = self._mean_variance(n) + self._mean_variance(self.reference_rows) + sampling_variance
        half = THRESHOLD_SD * np.sqrt(variance)
        return float(self.reference_error - half), float(self.reference_error + half)

    def _mean_variance(self, rows: int) -> float:
        """The variance of a mean error over ``rows`` rows (the chunks' scaled by chunk / rows)."""
        rows = max(rows, 1)
        return max(self.row_sd**2, self.chunk_sd**2 * self.chunk_rows) / rows


def _errors(raw: np.ndarray, means: np.ndarray, scales: np.ndarray, components: np.ndarray) -> np.ndarray:
    """Each row's distance to its reconstruction. The components are orthonormal rows, so the
    squared distance is |z|² − |z·Cᵀ|² (no n × d reconstruction is built)."""
    # In place where the values allow it (the same operations, so the same bits): each
    # temporary of a 1M × 20 window is 160 MB.
    z = raw - means
    z /= scales
    np.copyto(z, 0.0, where=np.isnan(z))  # a missing value sits at the reference mean
    projected = z @ components.T
    squared = np.einsum("ij,ij->i", z, z)
    squared -= np.einsum("ij,ij->i", projected, projected)
    np.maximum(squared, 0.0, out=squared)
    return np.sqrt(squared, out=squared)


def _fit(raw: np.ndarray, k: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Means, scales and the components keeping VARIANCE_KEPT (or the first k) of ``raw``."""
    means, scales = np.nanmean(raw, axis=0), np.nanstd(raw, axis=0)
    scales = np.where(scales > 0, scales, 1.0)  # a column constant in this part: its own unit
    z = np.where(np.isnan(raw), 0.0, (raw - means) / scales)
    _, singular, vt = np.linalg.svd(z, full_matrices=False)
    if k is None:
        explained = np.cumsum(singular**2) / np.sum(singular**2)
        k = int(np.searchsorted(explained, VARIANCE_KEPT) + 1)
    return means, scales, vt[:k]


def _encode(frame: pd.DataFrame, columns: list[str], frequencies: dict[str, dict[str, float]]) -> np.ndarray:
    # Filled a column per row of a (columns, rows) array, then turned into the row-major matrix
    # in one copy: writing each column down a row-major 1M × 20 array strided every write
    # (0.27-0.7 s against 0.07 s, same values).
    out = np.empty((len(columns), len(frame)))
    for j, name in enumerate(columns):
        out[j] = _encoded(frame[name], frequencies.get(name))
    return np.ascontiguousarray(out.T)


def _rows(values: pd.Series, rows: np.ndarray | None) -> pd.Series:
    """The column, or those rows of it: a sample's rows are taken before they are encoded."""
    return values if rows is None else values.iloc[rows]


def _encoded(values: pd.Series, shares: dict[str, float] | None) -> np.ndarray:
    """A column as PCA reads it: a category's reference share (``shares``), else the number."""
    if shares is not None:
        if isinstance(values.dtype, pd.CategoricalDtype) and all(
            isinstance(c, str) for c in values.cat.categories
        ):
            # Each category looked up once and taken by the codes (-1, missing: the trailing NaN),
            # as _frequency_encoded does for distinct strings.
            table = np.array([*(shares.get(c, 0.0) for c in values.cat.categories), np.nan])
            return table[values.cat.codes.to_numpy()]
        return _frequency_encoded(values.to_numpy(dtype=object), shares)
    return pd.to_numeric(values, errors="coerce").to_numpy(dtype="float64")


def _frequency_encoded(values: np.ndarray, shares: dict[str, float]) -> np.ndarray:
    """Each value's share in the reference by its text (0 for one it never saw), NaN for None.
    When every distinct value is a string, pandas' hash kernel finds them (equal strings have
    the same text) and each is looked up once: the lookup per row took 0.19-0.24 s per 1M
    rows, this 0.05-0.07. Another kind of value (1 and 1.0 and True are equal but their texts
    are not) is looked up row by row, as are pandas' other missing values (NaN's text is "nan")."""
    codes, uniques = pd.factorize(values, use_na_sentinel=True)  # missing (None, NaN, NaT, NA): -1
    if not all(isinstance(u, str) for u in uniques):
        return np.array([np.nan if v is None else shares.get(str(v), 0.0) for v in values], dtype="float64")
    out = np.array([*(shares.get(u, 0.0) for u in uniques), np.nan])[codes]
    for i in np.flatnonzero(codes < 0):
        if values[i] is not None:
            out[i] = shares.get(str(values[i]), 0.0)
    return out


def fit_pca_drift(reference: pd.DataFrame, column_types: dict[str, str]) -> PcaDrift | None:
    """Fit on the reference rows; None with too few rows, fewer than two usable columns, or
    when keeping VARIANCE_KEPT needs every column (a reconstruction error of 0 with a band of
    0 width, which float noise crossed: an alarm on nothing)."""
    if len(reference) < MIN_REFERENCE_ROWS:
        return None
    encodings = {n: feature_type(t).encoding for n, t in column_types.items()}
    frequencies = {
        n: {
            str(k): float(v)
            for k, v in reference[n].dropna().astype(str).value_counts(normalize=True).items()
        }
        for n, encoding in encodings.items()
        if encoding == "category"
    }
    columns = [n for n, encoding in encodings.items() if encoding is not None]  # None: a type PCA skips
    raw = _encode(reference, columns, frequencies)
    means, scales = np.nanmean(raw, axis=0), np.nanstd(raw, axis=0)
    usable = np.isfinite(scales) & (scales > 0)
    if usable.sum() < 2:
        return None
    columns = [c for c, ok in zip(columns, usable, strict=True) if ok]
    frequencies = {n: f for n, f in frequencies.items() if n in columns}
    raw = raw[:, usable]
    chunk_rows = len(raw) // CHUNKS
    chunks = np.arange(chunk_rows * CHUNKS).reshape(CHUNKS, chunk_rows)
    means, scales, components = _fit(raw[chunks[0::2].ravel()])
    if len(components) == len(columns):
        return None  # every direction kept: each row is its own reconstruction, nothing to test
    held_out = chunks[1::2]
    errors = _errors(raw[held_out.ravel()], means, scales, components).reshape(held_out.shape)
    return PcaDrift(
        columns,
        frequencies,
        means,
        scales,
        components,
        float(errors.mean()),
        float(errors.std(ddof=1)),
        float(errors.mean(axis=1).std(ddof=1)),
        chunk_rows,
        errors.size,
    )


class MultivariateDriftDict(TypedDict):
    """Stored as ``QualityCheck.drift["multivariate"]``."""

    method: str
    score: float
    reference: float
    threshold: float
    band: list[float]
    components: int
    columns: list[str]
    drifted: bool
    higher_is_drift: bool  # the error drifts above the band's upper edge, the stored threshold
    # A very large window's mean error from a sample of its rows; ``error``: that mean's
    # standard error as an estimate of the whole window's (absent: every row was scored).
    sample: NotRequired[SampleDict]


def multivariate_drift(
    model: PcaDrift, frame: pd.DataFrame, *, sampled_from: int | None = None
) -> MultivariateDriftDict:
    """The window's mean reconstruction error, its alarm band and the decision. Past
    ``SAMPLE_ABOVE`` rows the mean is taken on a uniform sample of ``SAMPLE_SIZE`` of them
    (10M rows x 20 columns: 2.95 s scored whole), and the band is widened by that mean's
    sampling variance, S² / m · (1 - m / N) with S² the sample's variance of the errors: a
    design-based variance, exact whatever the rows' dependence. ``sampled_from``: ``frame``
    holds those sampled rows already (``shared_sample_positions(sampled_from)``, in order) of a
    window of that many rows, taken while each column was read (a window whose features are
    read one at a time)."""
    n = len(frame) if sampled_from is None else sampled_from
    if sampled_from is not None and not (n > sorts.SAMPLE_ABOVE and len(frame) == sorts.SAMPLE_SIZE):
        raise ValueError(f"a window of {n} rows is not sampled (its {len(frame)} rows are not its sample)")
    sample: SampleDict | None = None
    sampling_variance = 0.0
    if n > sorts.SAMPLE_ABOVE:
        rows = None if sampled_from is not None else shared_sample_positions(n)
        errors = model.errors(frame, rows)
        m = errors.size
        sampling_variance = float(errors.var(ddof=1)) / m * (1 - m / n)
        sample = {"rows": int(m), "of": int(n), "error": float(np.sqrt(sampling_variance))}
    else:
        errors = model.errors(frame)
    out = _drift_dict(model, float(errors.mean()), n, sampling_variance)
    if sample is not None:
        out["sample"] = sample
    return out


def multivariate_from_sums(model: PcaDrift, total: float, n: int) -> MultivariateDriftDict:
    """``multivariate_drift`` of a window whose rows' reconstruction errors were summed apart
    (``total``: their sum over all ``n`` rows, the slices of a fanned-out check): every row
    scored, so no sample and no sampling variance."""
    return _drift_dict(model, total / n, n, 0.0)


def _drift_dict(model: PcaDrift, value: float, n: int, sampling_variance: float) -> MultivariateDriftDict:
    low, high = model.band(n, sampling_variance)
    out: MultivariateDriftDict = {
        "method": "pca_reconstruction_error",
        "score": value,
        "reference": model.reference_error,
        "threshold": high,  # the upper edge, as for the per-feature scores
        "band": [low, high],
        "components": int(model.components.shape[0]),
        "columns": model.columns,
        "drifted": bool(value < low or value > high),
        "higher_is_drift": True,
    }
    return out
