import io
import json
import os
import pickle
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.workers.training.headers import with_header_factory
from workers.training import engine
from workers.training.artifacts import ArtifactError, Predictor, bundle_from_bytes, bundle_to_bytes
from workers.training.recipes import Recipe, RecipeError, RecipeNotAllowed
from workers.training.tabular import TabularClassifier, train_tabular_classifier


def _trained_bytes(recipe: Recipe, schema: dict[str, Any], churn: Any) -> bytes:
    frame, labels = churn
    prepared = engine.prepare(recipe, schema, frame, labels)
    result = engine.train(replace(recipe, epochs=1), prepared, engine.TrainingPlan(batch_size=64))
    return bundle_to_bytes(result.bundle)


def test_safetensors_bundle_round_trips_to_the_same_predictions(fast_recipe, churn_schema, churn) -> None:
    raw = _trained_bytes(fast_recipe, churn_schema, churn)
    first = Predictor.from_bytes(raw).predict(churn[0])
    second = Predictor.from_bytes(raw).predict(churn[0])
    assert first[0] == second[0]
    assert (first[1] == second[1]).all()


def test_bundle_keeps_recipe_and_preprocessing(fast_recipe, churn_schema, churn) -> None:
    bundle = bundle_from_bytes(_trained_bytes(fast_recipe, churn_schema, churn))
    assert bundle.recipe.max_batch_size == 64
    assert bundle.encoder.vocab["contract"] == ["monthly", "two-year", "yearly"]


def test_an_artifact_written_before_input_adapters_loads_with_the_tabular_one(
    fast_recipe, churn_schema, churn
) -> None:
    from safetensors.torch import save

    bundle = bundle_from_bytes(_trained_bytes(fast_recipe, churn_schema, churn))
    meta = bundle.metadata()
    del meta["preprocessing"]["adapter"]  # the preprocessing as artifacts wrote it before adapters
    raw = save(dict(bundle.state_dict), metadata={"driftwatch": json.dumps(meta)})
    loaded = bundle_from_bytes(raw)
    assert loaded.adapter.kind == "tabular"
    assert Predictor(loaded).predict(churn[0])[0] == Predictor(bundle).predict(churn[0])[0]


class _Exploit:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> Any:
        return (os.system, (f"touch {self.marker}",))


def test_malicious_pickle_as_weights_is_refused_without_running(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    buffer = io.BytesIO()
    torch.save({"state_dict": {"w": torch.zeros(1)}, "payload": _Exploit(marker)}, buffer)
    with pytest.raises(ArtifactError, match="refused"):
        bundle_from_bytes(buffer.getvalue())
    assert not marker.exists()


def test_plain_pickle_is_refused(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    with pytest.raises(ArtifactError):
        bundle_from_bytes(pickle.dumps(_Exploit(marker)))
    assert not marker.exists()


def test_weights_that_do_not_fit_the_recipe_are_refused(fast_recipe, churn_schema, churn) -> None:
    bundle = bundle_from_bytes(_trained_bytes(fast_recipe, churn_schema, churn))
    bundle.state_dict["0.weight"] = torch.zeros(3, 3)
    with pytest.raises(ArtifactError, match="do not fit"):
        bundle_from_bytes(bundle_to_bytes(bundle))


def test_first_demo_artifacts_still_load(churn) -> None:
    frame, labels = churn
    clf = train_tabular_classifier(frame, labels, feature_types={"tenure_months": "numerical",
                                   "contract": "categorical"}, classes=["stay", "churn"], epochs=1)  # fmt: skip
    predictor = Predictor.from_bytes(clf.to_bytes())
    assert predictor.predict(frame)[0] == TabularClassifier.from_bytes(clf.to_bytes()).predict(frame)


@pytest.mark.parametrize("factory", ["os:system", "logging.config:fileConfig", "unittest.__main__:main"])
def test_predictor_refuses_an_artifact_whose_header_names_a_module_outside_the_allow_list(
    fast_recipe, churn_schema, churn, factory: str
) -> None:
    raw = with_header_factory(_trained_bytes(fast_recipe, churn_schema, churn), factory)
    with pytest.raises(RecipeNotAllowed, match="DRIFTWATCH_RECIPE_MODULES"):
        Predictor.from_bytes(raw)


def test_a_factory_raising_systemexit_is_a_recipe_error(
    fast_recipe, churn_schema, churn, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, allow_recipe_modules
) -> None:
    (tmp_path / "exits_in_factory_probe.py").write_text("def build(schema, hp):\n    raise SystemExit(4)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    allow_recipe_modules("exits_in_factory_probe")
    raw = with_header_factory(
        _trained_bytes(fast_recipe, churn_schema, churn), "exits_in_factory_probe:build"
    )
    with pytest.raises(RecipeError, match="raised SystemExit"):
        Predictor.from_bytes(raw)
