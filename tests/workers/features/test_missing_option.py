"""The ``missing`` option of embedding and text features: validated like any option, bound per
feature (the registered types still refuse), the other refusals unchanged, missing values kept
as missing through the column, and drift tested on the present rows (evidently as the oracle)."""

from typing import Any

import numpy as np
import pandas as pd
import pytest
from evidently.legacy.calculations.stattests.text_content_drift import _perc_text_content_drift
from evidently.legacy.core import ColumnType
from evidently.legacy.metrics.data_drift.embedding_drift_methods import ModelDriftMethod

from workers.drift import data_drift, data_quality, summarize_reference
from workers.drift.descriptors import descriptor_drift
from workers.features import InvalidValue, feature_type
from workers.features.embedding import Embedding
from workers.features.text import Text

DIM = 8
WORDS = "good great fine product works love quality fast cheap nice sturdy bright".split()
OTHER = "broken refund terrible late awful missing damaged slow poor worst".split()


def _texts(n: int, vocabulary: list[str], *, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(vocabulary, int(rng.integers(3, 12)))) for _ in range(n)]


def _with_gaps(values: list[Any], every: int) -> list[Any]:
    """Every ``every``-th value replaced by None (a missing value, as ingestion stores it)."""
    return [None if i % every == 0 else v for i, v in enumerate(values)]


@pytest.mark.parametrize("kind", [Embedding(), Text()])
@pytest.mark.parametrize("value", ["yes", "Allow", True, None, 1, ["allow"]])
def test_a_missing_option_other_than_refuse_or_allow_is_refused(kind: Any, value: Any) -> None:
    spec = {"dim": DIM, "missing": value}
    assert kind.option_errors(spec) == {"missing": "must be one of refuse, allow"}


@pytest.mark.parametrize("kind", [Embedding(), Text()])
@pytest.mark.parametrize("value", ["refuse", "allow"])
def test_refuse_and_allow_are_valid_missing_options(kind: Any, value: str) -> None:
    assert kind.option_errors({"dim": DIM, "missing": value}) == {}


@pytest.mark.parametrize("name", ["embedding", "text"])
def test_a_feature_allows_missing_values_only_when_its_spec_says_allow(name: str) -> None:
    registered = feature_type(name)
    assert "missing" in registered.options and registered.allows_missing is False
    spec = {"name": "f", "type": name, "dim": DIM}
    assert registered.bind(spec).allows_missing is False
    assert registered.bind(spec | {"missing": "refuse"}).allows_missing is False
    assert registered.bind(spec | {"missing": "allow"}).allows_missing is True
    assert registered.allows_missing is False  # binding never changes the registered type


def test_binding_the_missing_option_keeps_the_embeddings_dim() -> None:
    bound = feature_type("embedding").bind({"dim": DIM, "missing": "allow"})
    assert isinstance(bound, Embedding) and bound.dim == DIM


@pytest.mark.parametrize("name", ["numerical", "categorical"])
def test_numbers_and_categories_take_no_missing_option(name: str) -> None:
    # they always accept missing values: the option would mean nothing there
    assert "missing" not in feature_type(name).options and feature_type(name).allows_missing is True


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ([1.0] * (DIM - 1), f"expected {DIM} numbers, got {DIM - 1}"),
        ([1.0, "x", *[0.0] * (DIM - 2)], "element 1 is str, not a number"),
        ([float("nan"), *[0.0] * (DIM - 1)], "element 0 is not finite (NaN and infinity are rejected)"),
        (float("nan"), "embedding feature got float (send a list of numbers)"),
    ],
)
def test_allowing_missing_vectors_still_refuses_malformed_ones(value: Any, message: str) -> None:
    with pytest.raises(InvalidValue) as raised:
        Embedding(DIM, allows_missing=True).clean(value)
    assert raised.value.message == message


def test_a_windows_missing_vectors_stay_missing_beside_the_parsed_texts() -> None:
    vectors = np.random.default_rng(3).normal(size=(3, DIM)).astype("float32")
    texts = [str([float(v) for v in row]) for row in vectors]
    column = Embedding(DIM).column(pd.Series([texts[0], None, texts[1], np.nan, texts[2]]))
    assert column.iloc[1] is None and column.iloc[3] is None
    assert np.array_equal(np.vstack([column.iloc[0], column.iloc[2], column.iloc[4]]), vectors)
    assert Embedding(DIM).missing(column).tolist() == [False, True, False, True, False]


def _evidently_model(reference: np.ndarray, current: np.ndarray) -> tuple[float, bool]:
    """evidently's default embedding test on fresh copies (it adds a column to its frames)."""
    method = ModelDriftMethod(bootstrap=len(reference) < 1000)
    score, drifted, _ = method(
        pd.DataFrame(current.astype("float64")), pd.DataFrame(reference.astype("float64"))
    )
    return float(score), bool(drifted)


@pytest.mark.parametrize("shift", [0.0, 0.4])
def test_embedding_drift_is_evidentlys_on_the_present_rows(shift: float) -> None:
    rng = np.random.default_rng(11 + int(shift * 10))
    reference = rng.normal(size=(300, DIM)).astype("float32")
    current = (rng.normal(size=(250, DIM)) + shift).astype("float32")
    window = pd.DataFrame({"e": Embedding(DIM).column(pd.Series(_with_gaps(list(current), every=5)))})
    present = current[np.arange(len(current)) % 5 != 0]
    column = data_drift(
        pd.DataFrame({"e": Embedding(DIM).column(pd.Series(list(reference)))}), window, {"e": "embedding"}
    ).columns["e"]
    expected_score, expected_drift = _evidently_model(reference, present)
    assert column.n_current == len(present) == 200
    assert column.score == pytest.approx(expected_score, abs=1e-12)
    assert column.drifted is expected_drift


@pytest.mark.parametrize("vocabulary", [WORDS, WORDS[:6] + OTHER])
def test_text_drift_is_evidentlys_on_the_present_texts(vocabulary: list[str]) -> None:
    reference = pd.Series(_texts(300, WORDS, seed=1))
    texts = _texts(250, vocabulary, seed=2)
    present = pd.Series([t for i, t in enumerate(texts) if i % 5 != 0])
    expected_score, expected_drift = _perc_text_content_drift(
        reference.copy(), present.copy(), ColumnType.Text, 0.95
    )
    window = pd.DataFrame({"t": pd.Series(_with_gaps(texts, every=5), dtype="object")})
    column = data_drift(pd.DataFrame({"t": reference}), window, {"t": "text"}).columns["t"]
    assert column.n_current == len(present) == 200
    assert column.score == expected_score and column.drifted == bool(expected_drift)


def test_text_descriptors_are_tested_on_the_present_texts() -> None:
    summary = summarize_reference(pd.DataFrame({"t": _texts(300, WORDS, seed=1)}), {"t": "text"})
    texts = _texts(250, WORDS, seed=2)
    gaps = descriptor_drift(summary, pd.DataFrame({"t": pd.Series(_with_gaps(texts, 5))}), {"t": "text"})
    present = [t for i, t in enumerate(texts) if i % 5 != 0]
    whole = descriptor_drift(summary, pd.DataFrame({"t": pd.Series(present)}), {"t": "text"})
    assert gaps == whole and gaps["t"]["empty_share"]["n_current"] == 200


@pytest.mark.parametrize(
    ("kind", "value"), [("embedding", [0.5] * DIM), ("text", "fine product")], ids=["embedding", "text"]
)
def test_the_data_quality_section_reports_the_missing_share(kind: str, value: Any) -> None:
    values = _with_gaps([value] * 40, every=4)  # 10 of 40 missing: 25%, above the 20% default
    column = feature_type(kind).column(pd.Series(values, dtype="object"))
    quality = data_quality(pd.DataFrame({"f": column}), {"f": kind})
    assert quality["columns"]["f"] == {"missing_count": 10, "missing_share": 0.25}
    assert quality["broken_feed"] is True and quality["reasons"] == ["f: 25.0% missing (> 20%)"]
