"""Multivariate data drift: PCA reconstruction error against the reference (as NannyML's).

The features are standardised (categories frequency-encoded first, as their types' ``encoding`` says), projected on the
principal components that keep VARIANCE_KEPT of the reference's variance and mapped back; a
row's error is the distance to its reconstruction. The components encode how the features
move together, so a change in their relation (a correlation that flips) raises the error while
every marginal, and so every univariate test, stays the same. The alarm band is the reference's
mean error ± THRESHOLD_SD standard errors of a window's mean error: the larger of the per-row
sd over sqrt(n) and the sd of the mean over reference chunks rescaled to n (which keeps any
dependence between neighbouring rows in the band).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict

import numpy as np
import pandas as pd

from workers.features.registry import feature_type

VARIANCE_KEPT = 0.65  # NannyML's default
THRESHOLD_SD = 3.0
CHUNKS = 10
MIN_REFERENCE_ROWS = 100


@dataclass(frozen=True)
class PcaDrift:
    columns: list[str]
    frequencies: dict[str, dict[str, float]]  # categorical column -> value -> reference share
    means: np.ndarray
    scales: np.ndarray
    components: np.ndarray  # k x d, orthonormal rows
    reference_error: float  # mean reconstruction error on the reference
    row_sd: float  # sd of one row's error on the reference
    chunk_sd: float  # sd of the mean error over reference chunks
    chunk_rows: int

    def errors(self, frame: pd.DataFrame) -> np.ndarray:
        z = (_encode(frame, self.columns, self.frequencies) - self.means) / self.scales
        z = np.where(np.isnan(z), 0.0, z)  # a missing value sits at the reference mean
        rebuilt = z @ self.components.T @ self.components
        return np.sqrt(((z - rebuilt) ** 2).sum(axis=1))

    def band(self, n: int) -> tuple[float, float]:
        """The alarm band for a window of n rows (the chunks' sd scaled by sqrt(chunk / n))."""
        n = max(n, 1)
        half = THRESHOLD_SD * max(self.row_sd / np.sqrt(n), self.chunk_sd * np.sqrt(self.chunk_rows / n))
        return float(self.reference_error - half), float(self.reference_error + half)


def _encode(frame: pd.DataFrame, columns: list[str], frequencies: dict[str, dict[str, float]]) -> np.ndarray:
    out = np.empty((len(frame), len(columns)))
    for j, name in enumerate(columns):
        if name in frequencies:
            shares = frequencies[name]
            values = frame[name].astype("object")
            out[:, j] = [shares.get(str(v), 0.0) if v is not None else np.nan for v in values]
        else:
            out[:, j] = pd.to_numeric(frame[name], errors="coerce").to_numpy(dtype="float64")
    return out


def fit_pca_drift(reference: pd.DataFrame, column_types: dict[str, str]) -> PcaDrift | None:
    """Fit on the reference rows; None with too few rows or fewer than two usable columns."""
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
    means, scales, raw = means[usable], scales[usable], raw[:, usable]
    z = np.where(np.isnan(raw), 0.0, (raw - means) / scales)
    _, singular, vt = np.linalg.svd(z, full_matrices=False)
    explained = np.cumsum(singular**2) / np.sum(singular**2)
    k = int(np.searchsorted(explained, VARIANCE_KEPT) + 1)
    model = PcaDrift(columns, frequencies, means, scales, vt[:k], 0.0, 0.0, 0.0, 1)
    errors = model.errors(reference)
    chunk_rows = len(errors) // CHUNKS
    chunk_means = errors[: chunk_rows * CHUNKS].reshape(CHUNKS, chunk_rows).mean(axis=1)
    return PcaDrift(
        columns,
        frequencies,
        means,
        scales,
        vt[:k],
        float(errors.mean()),
        float(errors.std(ddof=1)),
        float(chunk_means.std(ddof=1)),
        chunk_rows,
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


def multivariate_drift(model: PcaDrift, frame: pd.DataFrame) -> MultivariateDriftDict:
    """The window's mean reconstruction error, its alarm band and the decision."""
    value = float(model.errors(frame).mean())
    low, high = model.band(len(frame))
    return {
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
