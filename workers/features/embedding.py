"""The ``embedding`` feature type: a vector of exactly ``dim`` finite numbers, stored as float32.

Registered as ``{"name": ..., "type": "embedding", "dim": D}`` (``MIN_DIM <= D <= MAX_DIM``). A
value is a JSON list of D numbers; a wrong length, a non-number, NaN/Infinity or a missing value
is refused naming the row and field. With ``"missing": "allow"`` a null value is stored as
missing instead (drift is tested on the present rows, the check's data quality reports the
missing share); the other refusals stand. In a CSV reference it is one cell holding a JSON list,
or D columns ``name[0]`` … ``name[D-1]``.

Drift methods (the policy's ``embedding_drift_method`` picks one, see ``EMBEDDING_METHODS``):

- ``model`` (default): evidently 0.7.23's default embedding test, legacy ``ModelDriftMethod``: an
  SGD log-loss domain classifier trained on half of reference ∪ window, its ROC AUC on the other
  half, drift above 0.55, or above the 95th percentile of 100 random-score AUCs when the reference
  has fewer than 1,000 rows (bootstrap). Scores and decisions equal evidently's.
- ``classifier_mw``: the same classifier and split, but the held-out AUC is turned into a
  one-sided Mann–Whitney p-value. The classifier never sees the held-out rows, so under no drift
  their reference/window labels are exchangeable given the scores and the p-value is valid at
  every sample size: the false-alarm rate holds at alpha (0.05), where ``model``'s fixed 0.55
  alarms on noise at small n (without bootstrap) and needs an ever larger effect at large n.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from workers.drift.distribution import (
    DistributionDict,
    ScatterDict,
    edges_for,
    fmt,
    fractions,
    histogram,
    psi,
)
from workers.drift.stats import StatTest
from workers.features.base import (
    MISSING,
    DriftScore,
    FeatureKind,
    InvalidValue,
    missing_allowed,
    missing_option_errors,
)
from workers.features.registry import register_feature_type

MIN_DIM, MAX_DIM = 1, 4096
# The reference vectors kept in the summary: all of them up to this many, else a fixed-seed sample
# (61 MB at 768 dimensions in float32; evidently's test itself uses every reference row).
MAX_REFERENCE_VECTORS = 20_000
SAMPLE_SEED = 0
PCA_COMPONENTS = 2  # the drill-down's projection
PCA_FIT_ROWS = 5_000  # the basis is fitted on at most this many reference vectors
SCATTER_POINTS = 300  # per side in the drill-down's scatter (a fixed-seed sample)
# Arrow's CSV reader parses blocks of this size in parallel: 4 MiB is about 250 rows of 768
# numbers, so a 16 MiB chunk of a window's COPY still spreads over the cores.
CSV_BLOCK_BYTES = 1 << 22

# evidently 0.7.23 ``EmbeddingsDriftMetric``: bootstrap when the reference has < 1,000 rows;
# ``ModelDriftMethod``: threshold 0.55, 100 random-score AUCs, their 95th percentile; the split
# (test_size 0.5) and the classifier are seeded with 42.
BOOTSTRAP_BELOW_ROWS = 1000
MODEL_THRESHOLD = 0.55
N_RANDOM_AUCS = 100
RANDOM_AUC_QUANTILE = 0.95
SPLIT_SEED = 42
ALPHA = 0.05

# evidently compares with ``>`` (strict), hence inclusive=False on a higher-is-drift score.
MODEL = StatTest("model", "domain classifier ROC AUC", MODEL_THRESHOLD, higher_is_drift=True, inclusive=False)
CLASSIFIER_MW = StatTest(
    "classifier_mw", "domain classifier AUC, Mann-Whitney p_value", ALPHA, higher_is_drift=False
)
MEAN_PERM = StatTest(
    "mean_perm",
    "whitened and plain mean difference, main-axis second moments, permutation p_value",
    ALPHA,
    higher_is_drift=False,
)


@dataclass(frozen=True)
class EmbeddingSummary:
    """The reference's vectors (all, or a fixed-seed sample), their row count and PCA basis."""

    vectors: np.ndarray  # (rows kept, dim) float32
    n: int  # non-missing reference rows (before sampling)
    mean: np.ndarray  # (dim,) the basis's centre
    components: np.ndarray  # (PCA_COMPONENTS or fewer, dim)

    @property
    def dim(self) -> int:
        return int(self.vectors.shape[1])

    def project(self, vectors: np.ndarray) -> np.ndarray:
        return np.asarray((vectors - self.mean) @ self.components.T)


def vector_or_none(value: Any) -> np.ndarray | None:
    """A stored or loaded value as a 1-d float32 array; None when missing or not a vector."""
    if value is None or isinstance(value, str | bytes | dict):
        return None
    try:
        array = np.asarray(value, dtype="float32")
    except (TypeError, ValueError):
        return None
    return array if array.ndim == 1 and array.size and np.isfinite(array).all() else None


def _parsed(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)  # data only: JSON, never evaluated
    except ValueError:
        return None


def _is_null(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def parsed_lists(texts: list[Any]) -> list[np.ndarray] | None:
    """JSON list texts (a column of stored vectors as JSON text) parsed in one call:
    the brackets cut, the rows handed to Arrow's CSV reader as lines of float32 columns (its
    parser runs on every core; 2.0 s for 20,000 x 768 in bench/embedding_drift.py, where numpy's
    ``fromstring`` over the joined text took 9.2 s). The rows come back as views
    of one (n, dim) matrix. None unless every value is a non-empty list text, all of one length,
    whose numbers all parse finite (the caller then parses row by row and says which is wrong)."""
    if not texts or not all(
        isinstance(t, str) and len(t) > 2 and t[0] == "[" and t[-1] == "]" for t in texts
    ):
        return None
    import pyarrow as pa  # lazy: only a window of embeddings pays the import

    dim = texts[0].count(",") + 1
    body = "\n".join(t[1:-1] for t in texts).encode()
    try:
        table = _csv_rows(body, [pa.float32()] * dim)
    except (pa.ArrowInvalid, ValueError):  # a row of another length, a token that is not a number
        return None
    vectors = _finite_rows(table.columns) if table.num_rows == len(texts) else None
    return None if vectors is None else list(vectors)


def _csv_rows(body: bytes, types: list[Any], on_invalid: Callable[[Any], str] | None = None) -> Any:
    """Comma-separated lines as an Arrow table of ``types`` (no quoting: numbers only); a line
    of another field count raises, or is handed to ``on_invalid`` (its answer: "skip"/"error")."""
    import pyarrow as pa
    import pyarrow.csv as pa_csv

    names = [str(i) for i in range(len(types))]
    return pa_csv.read_csv(
        pa.py_buffer(body),
        read_options=pa_csv.ReadOptions(column_names=names, block_size=CSV_BLOCK_BYTES),
        parse_options=pa_csv.ParseOptions(
            quote_char=False, double_quote=False, invalid_row_handler=on_invalid
        ),
        convert_options=pa_csv.ConvertOptions(
            column_types=dict(zip(names, types, strict=True)), strings_can_be_null=False
        ),
    )


def _finite_rows(columns: list[Any]) -> np.ndarray | None:
    """Float32 Arrow columns as the rows of one (n, len(columns)) matrix; None if a value is
    null (a token such as ``null`` or ``NaN``) or not finite."""
    if any(column.null_count for column in columns):
        return None
    vectors = np.empty((len(columns[0]) if columns else 0, len(columns)), dtype="float32")
    for i, column in enumerate(columns):
        vectors[:, i] = column.to_numpy()
    return vectors if np.isfinite(vectors).all() else None


def matrix(values: pd.Series, dim: int | None = None) -> np.ndarray:
    """The column's non-missing vectors stacked as (n, dim) float32 (rows of another length drop)."""
    arrays = [a for a in map(vector_or_none, values) if a is not None]
    if dim is None and arrays:
        dim = int(pd.Series([a.size for a in arrays]).mode().iloc[0])
    kept = [a for a in arrays if a.size == dim]
    return np.vstack(kept) if kept else np.empty((0, dim or 0), dtype="float32")


def _pca_basis(vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    rows = vectors[np.random.default_rng(SAMPLE_SEED).permutation(len(vectors))[:PCA_FIT_ROWS]]
    mean = rows.mean(axis=0, dtype="float64")
    _, _, vt = np.linalg.svd(rows - mean, full_matrices=False)
    return mean.astype("float32"), vt[:PCA_COMPONENTS].astype("float32")


def summarize_embedding(values: pd.Series) -> EmbeddingSummary:
    vectors = matrix(values)
    n = len(vectors)
    if n > MAX_REFERENCE_VECTORS:
        keep = np.sort(np.random.default_rng(SAMPLE_SEED).choice(n, MAX_REFERENCE_VECTORS, replace=False))
        vectors = vectors[keep]
    if n == 0:
        return EmbeddingSummary(vectors, 0, np.zeros(vectors.shape[1], "float32"), vectors[:0])
    mean, components = _pca_basis(vectors)
    return EmbeddingSummary(vectors, n, mean, components)


# -- the domain classifier (evidently's ModelDriftMethod, operation for operation)


@dataclass(frozen=True)
class HeldOut:
    """The classifier's scores of the held-out half: y 1 = reference, 0 = window."""

    y: np.ndarray
    proba: np.ndarray  # predict_proba[:, 1], what evidently's AUC ranks
    margin: np.ndarray  # decision_function: the same order without float saturation ties


def domain_classifier(reference: np.ndarray, current: np.ndarray) -> HeldOut | None:
    """Reference (target 1) stacked over the window (target 0), split in halves with seed 42,
    an SGD log-loss classifier (seed 42) fitted on one half and scored on the other. None when
    a half lacks one of the two sides (a handful of rows)."""
    # sklearn only on this path (checks with an embedding feature), imported when first needed.
    from sklearn.linear_model import SGDClassifier
    from sklearn.model_selection import train_test_split

    data = np.vstack([reference, current]).astype("float64")
    target = np.concatenate([np.ones(len(reference), "int64"), np.zeros(len(current), "int64")])
    x_train, x_test, y_train, y_test = train_test_split(
        data, target, test_size=0.5, random_state=SPLIT_SEED, shuffle=True
    )
    if np.unique(y_train).size < 2 or np.unique(y_test).size < 2:
        return None
    clf = SGDClassifier(loss="log_loss", random_state=SPLIT_SEED).fit(x_train, y_train)
    return HeldOut(y_test, clf.predict_proba(x_test)[:, 1], clf.decision_function(x_test))


def random_auc_threshold(y: np.ndarray) -> float:
    """evidently's bootstrap threshold: the 95th percentile of the AUCs of 100 uniform random
    scores seeded 0..99 (``np.random.seed(i)``: a RandomState(i) draws the same numbers, without
    touching numpy's global state)."""
    from sklearn.metrics import roc_auc_score

    aucs = [roc_auc_score(y, np.random.RandomState(i).rand(len(y))) for i in range(N_RANDOM_AUCS)]
    return float(np.percentile(aucs, 100 * RANDOM_AUC_QUANTILE))


def model_score(reference: np.ndarray, current: np.ndarray, n_reference: int) -> tuple[float, float]:
    """(ROC AUC, threshold) of evidently's default embedding test; NaN when it cannot run."""
    held = domain_classifier(reference, current)
    return (math.nan, MODEL_THRESHOLD) if held is None else model_of(held, n_reference)


def model_of(held: HeldOut, n_reference: int) -> tuple[float, float]:
    from sklearn.metrics import roc_auc_score

    auc = float(roc_auc_score(held.y, held.proba))
    bootstrap = n_reference < BOOTSTRAP_BELOW_ROWS
    return auc, random_auc_threshold(held.y) if bootstrap else MODEL_THRESHOLD


def classifier_mw_score(reference: np.ndarray, current: np.ndarray, n_reference: int) -> tuple[float, float]:
    """(one-sided Mann–Whitney p-value of the held-out AUC > 0.5, alpha)."""
    held = domain_classifier(reference, current)
    return (math.nan, ALPHA) if held is None else classifier_mw_of(held)


def classifier_mw_of(held: HeldOut) -> tuple[float, float]:
    from scipy.stats import mannwhitneyu

    is_reference = held.y == 1
    result = mannwhitneyu(held.margin[is_reference], held.margin[~is_reference], alternative="greater")
    return float(result.pvalue), ALPHA


# -- the calibrated permutation test: a whitened and a plain mean difference, main-axis moments

N_PERMUTATIONS = 499  # p-values step by 1/500; the test is exact for any count
PERMUTATION_SEED = 0
PERMUTATION_CHUNK = 100  # permutations per matrix product: memory stays N x 100 float32
# Ridges, as multiples of the pooled covariance's mean eigenvalue, added before whitening; inf =
# no whitening (the plain mean difference, i.e. a linear-kernel MMD). The small ridge whitens
# nearly fully: a shift in a generic direction lies mostly off the few main axes, where the
# variance is smallest, and is found there (at 384 and 768 dims the single most powerful of ridges
# 0.01 to 10 on a small random-subspace shift; ridges 1 and 10, kept before, were never the best
# and each one more test the combination paid for). No whitening finds a shift along the main
# axes (a mixture weight), where whitening divides it by their large variance.
RIDGES = (0.03, math.inf)
# The second-moment statistic: products of the whitened coordinates on the pooled covariance's
# top axes. A new cluster or a mixture-weight change moves few rows far along a main axis; the
# means barely move but those axes' second moments do (measured in bench/embedding_drift.py:
# a 5% new cluster at n = 100 found 4 times as often as by the mean statistics).
MOMENT_AXES = 8
# Shares of alpha in the weighted min-p combination (``min_p``): whitened mean, plain mean,
# moments. A small shift in a generic direction is the whitened statistic's alone and near its
# limit at small n; a main-axis shift moves its statistics far, so a smaller share costs it
# little (bench/embedding_drift.py: equal shares left the small mean shift below the domain
# classifier at 384 dims, n = 200 and 500).
SHARES = (0.6, 0.2, 0.2)


@dataclass(frozen=True)
class PooledBasis:
    """The pooled rows, centred, and the pooled covariance's eigen-axes: a row's coordinates are
    ``rows @ rotation`` (rotation None: ``rows`` are the coordinates already). Label-free, so
    every relabelling sees the same basis."""

    rows: np.ndarray  # (N, dim) or, when N <= dim, (N, N) coordinates
    rotation: np.ndarray | None  # (dim, dim) eigenvectors
    variances: np.ndarray  # the variance along each axis


def pooled_basis(pooled: np.ndarray) -> PooledBasis:
    z = pooled - pooled.mean(axis=0, dtype="float64").astype("float32")
    n, dim = z.shape
    if n > dim:  # eigenvectors of the dim x dim scatter (the rows are rotated after summing)
        eigenvalues, vectors = np.linalg.eigh((z.T @ z).astype("float64"))
        return PooledBasis(z, vectors.astype("float32"), np.clip(eigenvalues, 0, None) / n)
    # the same coordinates from the n x n Gram matrix: U · sqrt(eigenvalue)
    eigenvalues, vectors = np.linalg.eigh((z @ z.T).astype("float64"))
    eigenvalues = np.clip(eigenvalues, 0, None)
    return PooledBasis((vectors * np.sqrt(eigenvalues)).astype("float32"), None, eigenvalues / n)


def _ridge_weights(variances: np.ndarray, dim: int) -> np.ndarray:
    """(len(RIDGES), axes): each statistic's weight per squared eigen-axis sum."""
    mean_variance = max(float(variances.sum()) / dim, 1e-12)
    rows = [np.ones_like(variances) if math.isinf(r) else 1 / (variances + r * mean_variance) for r in RIDGES]
    return np.vstack(rows) * mean_variance


def moment_features(basis: PooledBasis) -> np.ndarray:
    """(N, k(k+1)/2) float32: each row's products of its whitened coordinates on the top
    ``MOMENT_AXES`` axes, every product centred and scaled over the pooled rows (label-free)."""
    k = min(MOMENT_AXES, len(basis.variances))
    top = basis.rows[:, -k:] if basis.rotation is None else basis.rows @ basis.rotation[:, -k:]
    top = top.astype("float64") / np.sqrt(np.maximum(basis.variances[-k:], 1e-12))  # eigh: ascending
    first, second = np.triu_indices(k)
    products = top[:, first] * top[:, second]
    products -= products.mean(axis=0)
    scale = products.std(axis=0)
    return (products / np.where(scale > 0, scale, 1.0)).astype("float32")


def relabelled_sums(blocks: list[np.ndarray], n_reference: int) -> list[np.ndarray]:
    """Per block (N, features): (features, 1 + N_PERMUTATIONS) float64, the reference side's
    column sums, observed first, then under the same seeded random relabellings for every block
    (a 0/1 matrix product, ``PERMUTATION_CHUNK`` relabellings at a time)."""
    n = len(blocks[0])
    rng = np.random.default_rng(PERMUTATION_SEED)
    sums = [[block[:n_reference].sum(axis=0, dtype="float64")[:, None]] for block in blocks]
    for start in range(0, N_PERMUTATIONS, PERMUTATION_CHUNK):
        count = min(PERMUTATION_CHUNK, N_PERMUTATIONS - start)
        picks = np.zeros((n, count), dtype="float32")
        for j in range(count):
            picks[rng.permutation(n)[:n_reference], j] = 1.0
        for out, block in zip(sums, blocks, strict=True):
            out.append((block.T @ picks).astype("float64"))
    return [np.hstack(out) for out in sums]


def min_p(statistics: np.ndarray, shares: tuple[float, ...] | None = None) -> float:
    """Permutation min-p combination: statistics (tests, 1 + permutations), observed in column 0.
    Each test's p-value for every column against its own row, divided by the test's share (equal
    shares by default), then the observed smallest ranked among the columns' smallest: exact,
    like each test on its own, whatever the shares (they are fixed before the data is seen)."""
    # column b's count under test k: the columns whose statistic is at least b's (b included)
    at_least = np.array([np.searchsorted(np.sort(-row), -row, side="right") for row in statistics])
    weights = np.ones(len(statistics)) if shares is None else np.asarray(shares, dtype="float64")
    smallest = (at_least / weights[:, None]).min(axis=0)
    # a relative tolerance: equal scaled counts must tie although division rounds
    return float((smallest <= smallest[0] * (1 + 1e-12)).sum() / statistics.shape[1])


def mean_perm_score(reference: np.ndarray, current: np.ndarray, n_reference: int) -> tuple[float, float]:
    """(permutation p-value, alpha): the reference/window mean difference's squared norm after
    each of ``RIDGES``' whitenings, and the squared norm of the difference in the top axes'
    second moments (``moment_features``); the relabellings' same statistics; min-p combined
    with ``SHARES``."""
    basis = pooled_basis(np.vstack([reference, current]).astype("float32"))
    coordinate_sums, moment_sums = relabelled_sums([basis.rows, moment_features(basis)], len(reference))
    if basis.rotation is not None:
        coordinate_sums = basis.rotation.astype("float64").T @ coordinate_sums
    means = _ridge_weights(basis.variances, reference.shape[1]) @ np.square(coordinate_sums)
    moments = np.square(moment_sums).sum(axis=0)
    return min_p(np.vstack([means, moments]), SHARES), ALPHA


@dataclass(frozen=True)
class EmbeddingMethod:
    test: StatTest
    score: Callable[[np.ndarray, np.ndarray, int], tuple[float, float]]  # ref, cur, n_ref


EMBEDDING_METHODS: dict[str, EmbeddingMethod] = {
    MODEL.name: EmbeddingMethod(MODEL, model_score),
    CLASSIFIER_MW.name: EmbeddingMethod(CLASSIFIER_MW, classifier_mw_score),
    MEAN_PERM.name: EmbeddingMethod(MEAN_PERM, mean_perm_score),
}
DEFAULT_METHOD = MODEL.name


def _sampled_plane(points: np.ndarray) -> list[list[float]]:
    rng = np.random.default_rng(SAMPLE_SEED)
    keep = np.sort(rng.permutation(len(points))[:SCATTER_POINTS])
    plane = np.zeros((len(keep), 2))
    plane[:, : points.shape[1]] = points[keep, :2]  # one component only: y = 0
    return [[round(float(x), 4), round(float(y), 4)] for x, y in plane]


def scatter_points(summary: EmbeddingSummary, current: np.ndarray) -> ScatterDict:
    """Both sides on the reference's first two principal components, ``SCATTER_POINTS`` each."""
    return {
        "reference": _sampled_plane(summary.project(summary.vectors)),
        "current": _sampled_plane(summary.project(current)),
    }


class Embedding(FeatureKind[EmbeddingSummary]):
    name = "embedding"
    storage_dtype = "object"  # each value a float32 array (None when missing)
    encoding = None  # PCA, DLE and the tabular encoder leave it out
    summary_arrays = ("vectors", "mean", "components")
    array_prefix = "emb"
    distribution_note = "projection on the reference's first principal component"
    options = ("dim", MISSING)

    def __init__(self, dim: int | None = None, *, allows_missing: bool = False) -> None:
        self.dim = dim  # None: the registered, unbound type (checks lists of finite numbers)
        self.allows_missing = allows_missing  # the feature's "missing" option; refused by default

    # -- the feature's own options
    def option_errors(self, spec: Mapping[str, Any]) -> dict[str, str]:
        errors = missing_option_errors(spec)
        dim = spec.get("dim")
        if isinstance(dim, bool) or not isinstance(dim, int) or not MIN_DIM <= dim <= MAX_DIM:
            errors["dim"] = f"required: an integer from {MIN_DIM} to {MAX_DIM}"
        return errors

    def bind(self, spec: Mapping[str, Any]) -> Embedding:
        dim = int(spec["dim"]) if "dim" in spec else self.dim
        return Embedding(dim, allows_missing=missing_allowed(spec))

    @property
    def vector_dim(self) -> int | None:
        return self.dim

    def split_columns(self, name: str) -> list[str]:
        return [f"{name}[{i}]" for i in range(self.dim or 0)]

    # -- ingestion
    def clean(self, value: Any) -> Any:
        if not isinstance(value, list):
            raise InvalidValue(f"embedding feature got {type(value).__name__} (send a list of numbers)")
        if self.dim is not None and len(value) != self.dim:
            raise InvalidValue(f"expected {self.dim} numbers, got {len(value)}")
        for i, item in enumerate(value):
            if isinstance(item, bool) or not isinstance(item, int | float):
                raise InvalidValue(f"element {i} is {type(item).__name__}, not a number")
            if not math.isfinite(item):
                raise InvalidValue(f"element {i} is not finite (NaN and infinity are rejected)")
        return [float(v) for v in np.asarray(value, dtype="float32").tolist()]

    def parse_text(self, text: str) -> Any:
        try:
            return json.loads(text)  # data only: JSON, never evaluated
        except ValueError:
            raise InvalidValue(f"not a JSON list of numbers: {text[:40]!r}") from None

    def parse_cells(self, cells: list[str]) -> Any:
        """The ``name[i]`` CSV cells as one vector (every cell empty: a missing value)."""
        if all(c == "" for c in cells):
            return None
        values = []
        for i, text in enumerate(cells):
            try:
                values.append(float(text))
            except ValueError:
                raise InvalidValue(f"element {i}: not a number: {text[:40]!r}") from None
        return values

    # -- storage
    def column(self, values: pd.Series) -> pd.Series:
        """Stored lists, arrays, or JSON list texts (a reference file's; parsed as JSON, a missing
        value, None or NaN, stays None)."""
        items = values.tolist()
        present = [i for i, v in enumerate(items) if not _is_null(v)]
        fast = parsed_lists([items[i] for i in present])
        if fast is not None:
            out = np.full(len(items), None, dtype=object)
            for i, vector in zip(present, fast, strict=True):
                out[i] = vector
            return pd.Series(out, index=values.index, dtype="object")
        return pd.Series([vector_or_none(_parsed(v)) for v in values], index=values.index, dtype="object")

    # -- reference summary
    def summarize(self, values: pd.Series) -> EmbeddingSummary:
        return summarize_embedding(values)

    def summary_dump(self, summary: EmbeddingSummary) -> tuple[Any, dict[str, np.ndarray]]:
        arrays = {"vectors": summary.vectors, "mean": summary.mean, "components": summary.components}
        return {"n": summary.n}, arrays

    def summary_load(self, meta: Any, arrays: Mapping[str, np.ndarray]) -> EmbeddingSummary:
        return EmbeddingSummary(arrays["vectors"], int(meta["n"]), arrays["mean"], arrays["components"])

    # -- drift
    def default_stattest(self, n_reference: int, n_unique: int) -> StatTest:
        return MODEL

    def methods(self) -> tuple[str, ...]:
        return tuple(EMBEDDING_METHODS)

    def drift(self, summary: EmbeddingSummary, values: pd.Series) -> DriftScore | None:
        return self.drift_by(DEFAULT_METHOD, summary, values)

    def drift_by(self, method: str, summary: EmbeddingSummary, values: pd.Series) -> DriftScore | None:
        chosen = EMBEDDING_METHODS[method]
        current = matrix(values, summary.dim)
        if summary.n == 0 or len(current) == 0:
            return None
        score, threshold = chosen.score(summary.vectors, current, summary.n)
        return DriftScore(chosen.test, score, len(current), threshold)

    def distribution(self, summary: EmbeddingSummary, values: pd.Series) -> DistributionDict | None:
        current = matrix(values, summary.dim)
        if summary.n == 0 or len(current) == 0 or len(summary.components) == 0:
            return None
        reference_pc, current_pc = summary.project(summary.vectors)[:, 0], summary.project(current)[:, 0]
        edges = edges_for(reference_pc, current_pc)
        ref_counts, cur_counts = histogram(reference_pc, edges), histogram(current_pc, edges)
        return {
            "column_type": self.name,
            "labels": [f"[{fmt(a)}, {fmt(b)})" for a, b in zip(edges[:-1], edges[1:], strict=True)],
            "edges": [float(e) for e in edges],
            "reference": fractions(ref_counts),
            "current": fractions(cur_counts),
            "n_reference": int(summary.n),
            "n_current": int(len(current)),
            "psi": psi(ref_counts, cur_counts),
            "wasserstein_norm": None,
            "cramers_v": None,
            "points": scatter_points(summary, current),
        }

    # -- data quality
    def missing(self, values: pd.Series) -> np.ndarray:
        return np.array([vector_or_none(v) is None for v in values], dtype=bool)


EMBEDDING = register_feature_type(Embedding())
