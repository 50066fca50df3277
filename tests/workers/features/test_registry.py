"""Feature types are looked up in one registry: an unknown name is an error in every engine,
never a silent fallback to another type's rules."""

import numpy as np
import pandas as pd
import pytest

from workers.drift import data_drift, data_quality, summarize_reference
from workers.drift.distribution import column_distribution
from workers.drift.multivariate import fit_pca_drift
from workers.drift.stats import default_stattest
from workers.features import InvalidValue, UnknownFeatureType, feature_type, feature_type_names
from workers.training.tabular import Encoder

FRAME = pd.DataFrame({"v": np.arange(200.0), "w": np.arange(200.0) % 7})


def test_the_built_in_types_are_registered_in_order() -> None:
    assert feature_type_names()[:2] == ["numerical", "categorical"]


def test_looking_up_an_unknown_type_raises_naming_the_registered_ones() -> None:
    with pytest.raises(UnknownFeatureType, match=r"'audio'.*numerical"):
        feature_type("audio")


@pytest.mark.parametrize(
    "use",
    [
        lambda cols: summarize_reference(FRAME, cols),
        lambda cols: data_drift(FRAME, FRAME, cols),
        lambda cols: data_quality(FRAME, cols),
        lambda cols: fit_pca_drift(FRAME, cols),
        lambda cols: Encoder.fit(FRAME, cols),
        lambda cols: column_distribution(None, FRAME["v"], cols["v"]),
        lambda cols: default_stattest(cols["v"], 100, 10),
    ],
    ids=["summary", "drift", "data_quality", "pca", "training_encoder", "distribution", "stattest"],
)
def test_every_engine_refuses_an_unknown_type(use: object) -> None:
    with pytest.raises(UnknownFeatureType):
        use({"v": "audio", "w": "numerical"})  # type: ignore[operator]


@pytest.mark.parametrize(
    ("kind", "value", "message"),
    [
        ("numerical", "3", "numerical feature got str"),
        ("numerical", True, "numerical feature got bool"),
        ("categorical", 2.5, "categorical feature got float"),
        ("categorical", "x" * 1001, "at most 1000 characters"),
    ],
)
def test_a_type_refuses_a_malformed_value_with_the_message_the_api_returns(
    kind: str, value: object, message: str
) -> None:
    with pytest.raises(InvalidValue) as refused:
        feature_type(kind).clean(value)
    assert refused.value.message == message


@pytest.mark.parametrize(
    ("kind", "value", "cleaned"),
    [
        ("numerical", 2, 2),
        ("numerical", float("inf"), None),
        ("categorical", 7, "7"),
        ("categorical", False, "false"),
    ],
)
def test_a_type_cleans_what_it_accepts(kind: str, value: object, cleaned: object) -> None:
    assert feature_type(kind).clean(value) == cleaned


def test_evidentlys_choice_rule_is_declared_per_type() -> None:
    numerical, categorical = feature_type("numerical"), feature_type("categorical")
    assert numerical.default_stattest(1000, 6).name == "ks"
    assert numerical.default_stattest(1001, 6).name == "wasserstein"
    assert numerical.default_stattest(1001, 5).name == "jensenshannon"
    assert categorical.default_stattest(1000, 6).name == "chisquare"
    assert categorical.default_stattest(1000, 2).name == "z"
