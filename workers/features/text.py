"""The ``text`` feature type: a string of at most ``MAX_TEXT_CHARS`` characters.

Registered as ``{"name": ..., "type": "text"}``. A value longer than the limit, a non-string or a
missing value is refused naming the row and field. With ``"missing": "allow"`` a null value is
stored as missing instead (drift and descriptors are tested on the present texts, the check's
data quality reports the missing share); the other refusals stand.

Drift, two layers:

- the feature's own decision: evidently 0.7.23's text-content drift, a domain classifier on the
  raw text (TF-IDF, sublinear tf, ``max_df=0.5``, English stop words, then an L1 SGD
  ``modified_huber`` classifier, seed 42) trained on half of reference ∪ window and scored by its
  ROC AUC on the other half. A reference of more than 1,000 rows takes ``abs_text_content_drift``
  (drift above 0.55); a smaller one ``perc_text_content_drift`` (drift above the 95th percentile
  of 1,000 random-score AUCs). Scores and decisions equal evidently's.
- descriptors computed with no download, each tested like a numerical feature (the numerical
  type's default test, evidently's choice rule): ``DESCRIPTORS`` below. They are stored beside
  the column, under ``drift["descriptors"][name]``, and shown as the feature's sub-rows.

The drill-down lists the words whose share of all words changed most.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from workers.drift.distribution import DistributionDict, psi
from workers.drift.stats import StatTest
from workers.drift.summary import NumericalSummary, summarize_numerical
from workers.features.base import (
    MISSING,
    DriftScore,
    FeatureKind,
    InvalidValue,
    missing_allowed,
    missing_option_errors,
)
from workers.features.numerical import NUMERICAL
from workers.features.registry import register_feature_type

MAX_TEXT_CHARS = 10_000
# The reference texts kept in the summary: all up to this many, else a fixed-seed sample
# (evidently's test uses every reference row; parity holds up to this size).
MAX_REFERENCE_TEXTS = 10_000
SAMPLE_SEED = 0
TOP_WORDS = 12  # the drill-down's words

# evidently 0.7.23 ``_get_default_stattest``: more than 1,000 reference rows → absolute threshold.
PERCENTILE_MAX_ROWS = 1000
ABS_THRESHOLD = 0.55
PERC_THRESHOLD = 0.95  # evidently's default_threshold; it uses p_value = 1 - threshold
N_RANDOM_AUCS = 1000
SPLIT_SEED = 42

# evidently compares the AUC with ``>`` (strict).
ABS_TEXT = StatTest(
    "abs_text_content_drift",
    "Absolute text content drift",
    ABS_THRESHOLD,
    higher_is_drift=True,
    inclusive=False,
)
PERC_TEXT = StatTest(
    "perc_text_content_drift",
    "Percentile text content drift",
    PERC_THRESHOLD,
    higher_is_drift=True,
    inclusive=False,
)

_WORD = re.compile(r"[^\W\d_]+")  # a run of letters (any script)


def words(text: str) -> list[str]:
    """The lower-cased letter runs of a text: the vocabulary's unit."""
    return _WORD.findall(text.lower())


def length_chars(text: str) -> float:
    return float(len(text))


def length_words(text: str) -> float:
    return float(len(text.split()))


def non_letter_share(text: str) -> float:
    """Share of characters that are not letters (whitespace and digits count); 0 for ''."""
    return sum(not c.isalpha() for c in text) / len(text) if text else 0.0


def is_empty(text: str) -> float:
    return 0.0 if text.strip() else 1.0


def oov_share(text: str, vocabulary: frozenset[str]) -> float:
    """Share of the text's words the reference's vocabulary lacks; 0 for a text with no word."""
    found = words(text)
    return sum(w not in vocabulary for w in found) / len(found) if found else 0.0


# Descriptors that need only the text, by the name stored under drift["descriptors"][column].
PLAIN_DESCRIPTORS: dict[str, Callable[[str], float]] = {
    "length_chars": length_chars,
    "length_words": length_words,
    "non_letter_share": non_letter_share,
    "empty_share": is_empty,
}
OOV = "oov_share"
DESCRIPTORS = (*PLAIN_DESCRIPTORS, OOV)


@dataclass(frozen=True)
class TextSummary:
    """The reference's texts (all, or a fixed-seed sample), its vocabulary and descriptor values.

    The vocabulary is taken from a fixed-seed half of the kept texts and the reference's
    out-of-vocabulary shares are measured on the other half, so the reference's own OOV share is
    what an unseen sample from it scores (measured on the texts it came from, it would be 0)."""

    texts: list[str]
    n: int  # non-missing reference rows (before sampling)
    vocabulary: frozenset[str]
    descriptors: dict[str, NumericalSummary]


def texts_of(values: pd.Series) -> list[str]:
    return [v for v in values if isinstance(v, str)]


def _vocabulary_split(n: int) -> tuple[np.ndarray, np.ndarray]:
    order = np.random.default_rng(SAMPLE_SEED).permutation(n)
    if n < 2:
        return order, order
    return np.sort(order[: n // 2]), np.sort(order[n // 2 :])


def descriptor_values(texts: list[str], vocabulary: frozenset[str]) -> dict[str, np.ndarray]:
    """Each descriptor's value per text."""
    out = {name: np.array([f(t) for t in texts], dtype="float64") for name, f in PLAIN_DESCRIPTORS.items()}
    out[OOV] = np.array([oov_share(t, vocabulary) for t in texts], dtype="float64")
    return out


def summarize_text(values: pd.Series) -> TextSummary:
    texts = texts_of(values)
    n = len(texts)
    if n > MAX_REFERENCE_TEXTS:
        keep = np.sort(np.random.default_rng(SAMPLE_SEED).choice(n, MAX_REFERENCE_TEXTS, replace=False))
        texts = [texts[i] for i in keep]
    vocab_rows, oov_rows = _vocabulary_split(len(texts))
    vocabulary = frozenset(w for i in vocab_rows for w in words(texts[i]))
    plain = descriptor_values(texts, vocabulary)
    plain[OOV] = np.array([oov_share(texts[i], vocabulary) for i in oov_rows], dtype="float64")
    descriptors = {name: summarize_numerical(pd.Series(v)) for name, v in plain.items()}
    return TextSummary(texts, n, vocabulary, descriptors)


# -- evidently's text-content drift (legacy data_drift_utils.calculate_text_drift_score)


def text_stattest(n_reference: int) -> StatTest:
    return ABS_TEXT if n_reference > PERCENTILE_MAX_ROWS else PERC_TEXT


def random_auc_percentile(y: np.ndarray, p_value: float) -> float:
    """evidently's ``roc_auc_random_classifier_percentile``: seeds drawn after ``seed(42)``, one
    uniform-score AUC per seed. RandomState(s) draws what ``np.random.seed(s)`` would, without
    resetting numpy's global state as evidently does."""
    # What roc_auc_score runs for binary labels, without its input validation (half of its cost
    # over 1,000 calls; the test compares the percentile with evidently's own function).
    from sklearn.metrics._ranking import _binary_roc_auc_score

    seeds = np.random.RandomState(SPLIT_SEED).randint(0, N_RANDOM_AUCS * 10, size=N_RANDOM_AUCS)
    aucs = [_binary_roc_auc_score(y, np.random.RandomState(s).rand(len(y))) for s in seeds]
    return float(np.percentile(aucs, 100 * (1 - p_value)))


def text_drift_score(reference: list[str], current: list[str], n_reference: int) -> tuple[float, float]:
    """(domain classifier ROC AUC, threshold); NaN when it cannot run (a half without one of
    the sides, or no term left after the stop words and ``max_df``)."""
    # sklearn only on this path (checks with a text feature), imported when first needed.
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import SGDClassifier
    from sklearn.metrics import roc_auc_score
    from sklearn.model_selection import train_test_split
    from sklearn.pipeline import Pipeline

    test = text_stattest(n_reference)
    data = pd.Series(reference + current, dtype="object")
    target = pd.Series([0] * len(reference) + [1] * len(current))
    x_train, x_test, y_train, y_test = train_test_split(
        data, target, test_size=0.5, random_state=SPLIT_SEED, shuffle=True
    )
    if y_train.nunique() < 2 or y_test.nunique() < 2:
        return math.nan, test.threshold
    pipeline = Pipeline(
        [
            ("vectorization", TfidfVectorizer(sublinear_tf=True, max_df=0.5, stop_words="english")),
            (
                "classification",
                SGDClassifier(
                    alpha=0.0001, max_iter=50, penalty="l1", loss="modified_huber", random_state=42
                ),
            ),
        ]
    )
    try:
        pipeline.fit(x_train, y_train)
    except ValueError:  # "empty vocabulary" / "no terms remain": nothing to classify on
        return math.nan, test.threshold
    auc = float(roc_auc_score(y_test, pipeline.predict_proba(x_test)[:, 1]))
    if test is ABS_TEXT:
        return auc, ABS_THRESHOLD
    return auc, random_auc_percentile(y_test.to_numpy(), p_value=1 - PERC_THRESHOLD)


def word_shares(texts: list[str]) -> Counter[str]:
    return Counter(w for t in texts for w in words(t))


class Text(FeatureKind[TextSummary]):
    name = "text"
    storage_dtype = "object"
    encoding = None  # PCA, DLE and the tabular encoder leave it out
    summary_arrays = tuple(f"d_{name}" for name in DESCRIPTORS)
    array_prefix = "txt"
    distribution_note = "the words whose share of all words changed most"
    options = (MISSING,)

    def __init__(self, *, allows_missing: bool = False) -> None:
        self.allows_missing = allows_missing  # the feature's "missing" option; refused by default

    # -- the feature's own options
    def option_errors(self, spec: Mapping[str, Any]) -> dict[str, str]:
        return missing_option_errors(spec)

    def bind(self, spec: Mapping[str, Any]) -> Text:
        return Text(allows_missing=missing_allowed(spec))

    # -- ingestion
    def clean(self, value: Any) -> Any:
        if not isinstance(value, str):
            raise InvalidValue(f"text feature got {type(value).__name__} (send a string)")
        if len(value) > MAX_TEXT_CHARS:
            raise InvalidValue(f"at most {MAX_TEXT_CHARS} characters, got {len(value)}")
        return value

    def parse_text(self, text: str) -> Any:
        return text

    # -- storage
    elementwise_column = True

    def column(self, values: pd.Series) -> pd.Series:
        return pd.Series(
            [v if isinstance(v, str) else None for v in values], index=values.index, dtype="object"
        )

    # -- reference summary
    def summarize(self, values: pd.Series) -> TextSummary:
        return summarize_text(values)

    def summary_dump(self, summary: TextSummary) -> tuple[Any, dict[str, np.ndarray]]:
        meta = {"n": summary.n, "texts": summary.texts, "vocabulary": sorted(summary.vocabulary)}
        return meta, {f"d_{name}": s.sorted_values for name, s in summary.descriptors.items()}

    def summary_load(self, meta: Any, arrays: Mapping[str, np.ndarray]) -> TextSummary:
        descriptors = {name: summarize_numerical(pd.Series(arrays[f"d_{name}"])) for name in DESCRIPTORS}
        return TextSummary(list(meta["texts"]), int(meta["n"]), frozenset(meta["vocabulary"]), descriptors)

    # -- drift
    def default_stattest(self, n_reference: int, n_unique: int) -> StatTest:
        return text_stattest(n_reference)

    def drift(self, summary: TextSummary, values: pd.Series) -> DriftScore | None:
        current = texts_of(values)
        if summary.n == 0 or not current:
            return None
        score, threshold = text_drift_score(summary.texts, current, summary.n)
        return DriftScore(text_stattest(summary.n), score, len(current), threshold)

    def descriptor_drift(self, summary: TextSummary, values: pd.Series) -> dict[str, DriftScore | None]:
        """Each descriptor of the window tested against the reference's like a numerical column."""
        current = descriptor_values(texts_of(values), summary.vocabulary)
        return {
            name: NUMERICAL.drift(summary.descriptors[name], pd.Series(current[name])) for name in DESCRIPTORS
        }

    def distribution(self, summary: TextSummary, values: pd.Series) -> DistributionDict | None:
        reference, current = word_shares(summary.texts), word_shares(texts_of(values))
        n_ref, n_cur = sum(reference.values()), sum(current.values())
        if not n_ref or not n_cur:
            return None
        every = sorted(set(reference) | set(current))
        change = {w: abs(current[w] / n_cur - reference[w] / n_ref) for w in every}
        top = sorted(every, key=lambda w: (-change[w], w))[:TOP_WORDS]
        ref_counts = np.array([reference[w] for w in every], dtype=float)
        cur_counts = np.array([current[w] for w in every], dtype=float)
        return {
            "column_type": self.name,
            "labels": top,
            "edges": [],
            "reference": [reference[w] / n_ref for w in top],
            "current": [current[w] / n_cur for w in top],
            "n_reference": int(summary.n),
            "n_current": len(texts_of(values)),
            "psi": psi(ref_counts, cur_counts),
            "wasserstein_norm": None,
            "cramers_v": None,
        }

    # -- data quality
    def missing(self, values: pd.Series) -> np.ndarray:
        return np.array([not isinstance(v, str) for v in values], dtype=bool)


TEXT = register_feature_type(Text())
