"""The text feature type: descriptor values on known strings, evidently's text-content drift as
the oracle for the domain classifier, and a vocabulary shift detected where a same-source sample
is not."""

import numpy as np
import pandas as pd
import pytest
from evidently.legacy.calculations.stattests.text_content_drift import _perc_text_content_drift
from evidently.legacy.calculations.stattests.text_content_drift_abs import _abs_text_content_drift
from evidently.legacy.core import ColumnType
from evidently.legacy.utils.data_drift_utils import roc_auc_random_classifier_percentile

from workers.drift.descriptors import descriptor_drift
from workers.drift.engine import data_drift
from workers.drift.summary import ReferenceSummary, summarize_reference
from workers.features import InvalidValue, feature_type
from workers.features.text import (
    MAX_TEXT_CHARS,
    is_empty,
    length_chars,
    length_words,
    non_letter_share,
    oov_share,
    random_auc_percentile,
    words,
)

PRAISE = "good great fine product works love quality fast cheap nice sturdy bright".split()
COMPLAINT = "broken refund terrible late awful missing damaged slow poor worst".split()


def _texts(n: int, vocabulary: list[str], *, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(vocabulary, int(rng.integers(3, 12)))) for _ in range(n)]


def _mixed(n: int, *, seed: int, complaint_share: float) -> list[str]:
    rng = np.random.default_rng(seed)
    return [
        " ".join(
            rng.choice(COMPLAINT if rng.random() < complaint_share else PRAISE, int(rng.integers(3, 12)))
        )
        for _ in range(n)
    ]


@pytest.mark.parametrize(
    ("text", "chars", "n_words", "non_letters", "empty"),
    [
        ("", 0.0, 0.0, 0.0, 1.0),
        ("   ", 3.0, 0.0, 1.0, 1.0),
        ("Hello world", 11.0, 2.0, 1 / 11, 0.0),
        ("abc 123!", 8.0, 2.0, 5 / 8, 0.0),
        ("Ünïcödé ok", 10.0, 2.0, 1 / 10, 0.0),
    ],
)
def test_descriptors_of_known_strings(
    text: str, chars: float, n_words: float, non_letters: float, empty: float
) -> None:
    assert (length_chars(text), length_words(text), is_empty(text)) == (chars, n_words, empty)
    assert non_letter_share(text) == pytest.approx(non_letters)


def test_out_of_vocabulary_share_counts_lower_cased_letter_runs() -> None:
    assert words("The cat's 2 HATS") == ["the", "cat", "s", "hats"]
    assert oov_share("The cat's 2 HATS", frozenset({"the", "cat"})) == 0.5
    assert oov_share("123 !!", frozenset()) == 0.0


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (3, "text feature got int (send a string)"),
        (["a"], "text feature got list (send a string)"),
        ("x" * (MAX_TEXT_CHARS + 1), f"at most {MAX_TEXT_CHARS} characters, got {MAX_TEXT_CHARS + 1}"),
    ],
)
def test_a_non_string_or_an_over_long_text_is_refused(value: object, message: str) -> None:
    with pytest.raises(InvalidValue) as refused:
        feature_type("text").clean(value)
    assert refused.value.message == message


def test_a_text_at_the_limit_is_kept_as_sent() -> None:
    text = "é" * MAX_TEXT_CHARS
    assert feature_type("text").clean(text) == text


def test_the_summary_survives_its_serialised_form() -> None:
    summary = summarize_reference(pd.DataFrame({"t": _texts(50, PRAISE, seed=1)}), {"t": "text"})
    loaded = ReferenceSummary.from_bytes(summary.to_bytes()).column("t")
    original = summary.column("t")
    assert (loaded.texts, loaded.n, loaded.vocabulary) == (original.texts, 50, original.vocabulary)
    assert np.array_equal(
        loaded.descriptors["length_chars"].sorted_values, original.descriptors["length_chars"].sorted_values
    )


@pytest.mark.parametrize(
    ("n_reference", "oracle", "method"),
    [
        (300, _perc_text_content_drift, "perc_text_content_drift"),
        (1100, _abs_text_content_drift, "abs_text_content_drift"),
    ],
)
@pytest.mark.parametrize("complaint_share", [0.0, 0.08, 0.5])
def test_the_text_decision_and_score_equal_evidentlys(
    n_reference: int, oracle: object, method: str, complaint_share: float
) -> None:
    reference = pd.Series(_mixed(n_reference, seed=1, complaint_share=0.05))
    current = pd.Series(_mixed(200, seed=2, complaint_share=complaint_share))
    threshold = 0.95 if method.startswith("perc") else 0.55
    expected_score, expected_drift = oracle(reference.copy(), current.copy(), ColumnType.Text, threshold)  # type: ignore[operator]
    column = data_drift(pd.DataFrame({"t": reference}), pd.DataFrame({"t": current}), {"t": "text"}).columns[
        "t"
    ]
    assert column.method == method and column.higher_is_drift is True
    assert column.score is not None and column.score == expected_score
    assert column.drifted == bool(expected_drift)


@pytest.mark.parametrize(("n_zero", "n_one"), [(150, 100), (40, 260)])
def test_the_percentile_threshold_equals_evidentlys(n_zero: int, n_one: int) -> None:
    y = np.array([0] * n_zero + [1] * n_one)
    np.random.default_rng(n_zero).shuffle(y)
    state = np.random.get_state()
    ours = random_auc_percentile(y, p_value=1 - 0.95)
    assert all(np.array_equal(a, b) for a, b in zip(state, np.random.get_state(), strict=True))
    assert ours == roc_auc_random_classifier_percentile(y, p_value=1 - 0.95)  # reseeds numpy


def test_a_vocabulary_shift_is_detected_by_the_classifier_and_the_oov_descriptor() -> None:
    reference = summarize_reference(pd.DataFrame({"t": _texts(300, PRAISE, seed=1)}), {"t": "text"})
    current = pd.DataFrame({"t": _texts(200, PRAISE[:6] + COMPLAINT, seed=2)})
    assert data_drift(reference, current, {"t": "text"}).columns["t"].drifted
    descriptors = descriptor_drift(reference, current, {"t": "text"})["t"]
    oov = descriptors["oov_share"]
    assert oov["drifted"] and oov["score"] is not None and oov["score"] < 1e-6


def test_a_sample_from_the_reference_source_is_not_flagged() -> None:
    reference = summarize_reference(pd.DataFrame({"t": _texts(300, PRAISE, seed=1)}), {"t": "text"})
    current = pd.DataFrame({"t": _texts(200, PRAISE, seed=2)})
    assert not data_drift(reference, current, {"t": "text"}).columns["t"].drifted
    descriptors = descriptor_drift(reference, current, {"t": "text"})["t"]
    assert set(descriptors) == {
        "length_chars",
        "length_words",
        "non_letter_share",
        "empty_share",
        "oov_share",
    }
    assert not any(d["drifted"] for d in descriptors.values())


def test_the_drill_down_lists_the_words_whose_share_changed_most() -> None:
    reference = summarize_reference(pd.DataFrame({"t": _texts(300, PRAISE, seed=1)}), {"t": "text"})
    current = pd.Series(_texts(200, PRAISE[:6] + COMPLAINT, seed=2))
    distribution = feature_type("text").distribution(reference.column("t"), current)
    assert distribution is not None
    # The six praise words the window lost (1/12 of words each → 0) then the new complaint words.
    assert set(distribution["labels"][:6]) == set(PRAISE[6:])
    assert set(distribution["labels"][6:]) <= set(COMPLAINT) and len(distribution["labels"]) == 12
    assert distribution["current"][0] == 0.0 and distribution["reference"][-1] == 0.0
