"""Deep recipes: the text transformer with its learned tokenizer, the embedding MLP, fine-tuning
(frozen layers, warm-up + cosine, clipping), checkpoints a killed run resumes from, and the
planner sizing the longest text."""

import sys
from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch

from tests.workers.training.texts import TEXT_FEATURES, TEXT_RECIPE, reviews
from workers.training import checkpoint, engine
from workers.training.artifacts import (
    PendingAdapter,
    Predictor,
    bundle_from_bytes,
    bundle_to_bytes,
    read_bundle,
)
from workers.training.checkpoint import MemoryStore
from workers.training.recipes import (
    EMBEDDING_CLASSIFICATION,
    RecipeError,
    RecipeNotAllowed,
    recipe_from_dict,
)

CUSTOM = "tests.workers.training.custom_models"
TEXT_SCHEMA = engine.make_schema("classification", TEXT_FEATURES, ["no", "yes"])


def _weights(result: engine.TrainingResult) -> dict[str, Any]:
    return result.bundle.state_dict


def test_the_text_recipe_learns_its_tokenizer_from_the_texts_and_saves_it_with_the_version() -> None:
    frame, labels = reviews(200, seed=0)
    recipe = replace(TEXT_RECIPE, epochs=8, learning_rate=5e-3)
    prepared = engine.prepare(recipe, TEXT_SCHEMA, frame, labels)
    assert prepared.adapter.kind == "tokenizer" and "good" in prepared.adapter.vocabulary
    result = engine.train(recipe, prepared, engine.TrainingPlan(batch_size=16))
    restored = bundle_from_bytes(bundle_to_bytes(result.bundle))
    assert restored.adapter.vocabulary == prepared.adapter.vocabulary
    test, truth = reviews(200, seed=1)
    predictions, proba = Predictor(restored).predict(test)
    assert np.allclose(proba, Predictor(result.bundle).predict(test)[1])
    assert np.mean([p == y for p, y in zip(predictions, truth, strict=True)]) > 0.8


def test_the_embedding_recipe_trains_an_mlp_on_the_vectors_and_the_tabular_features() -> None:
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(400, 6)).astype("float32")
    frame = pd.DataFrame({"vec": list(vectors), "n": rng.normal(size=400)})
    labels = ["yes" if v[0] + v[1] > 0 else "no" for v in vectors]
    schema = engine.make_schema("classification", {"vec": "embedding", "n": "numerical"}, ["no", "yes"])
    recipe = replace(EMBEDDING_CLASSIFICATION, epochs=15, hyperparameters={"hidden": 16}, learning_rate=1e-2)
    prepared = engine.prepare(recipe, schema, frame, labels)
    assert prepared.schema["input_width"] == 7
    result = engine.train(recipe, prepared, engine.TrainingPlan(batch_size=32))
    predictions, _ = Predictor(bundle_from_bytes(bundle_to_bytes(result.bundle))).predict(frame)
    assert np.mean([p == y for p, y in zip(predictions, labels, strict=True)]) > 0.85


def test_fine_tuning_starts_from_the_champion_and_leaves_frozen_layers_untouched() -> None:
    frame, labels = reviews(200, seed=0)
    champion = engine.train(TEXT_RECIPE, engine.prepare(TEXT_RECIPE, TEXT_SCHEMA, frame, labels),
                            engine.TrainingPlan(batch_size=16)).bundle  # fmt: skip
    recipe = replace(TEXT_RECIPE, freeze=["tokens", "encoder.layers.0"])
    drifted, flipped = reviews(200, seed=2, concept=1)
    prepared = engine.prepare(recipe, TEXT_SCHEMA, drifted, flipped, start_from=champion)
    assert prepared.adapter is champion.adapter  # the champion's tokenizer, not a refitted one
    after = engine.train(recipe, prepared, engine.TrainingPlan(batch_size=16)).bundle.state_dict
    frozen = [k for k in after if k.startswith(("tokens.", "encoder.layers.0."))]
    assert frozen and all(torch.equal(after[k], champion.state_dict[k]) for k in frozen)
    assert not torch.equal(after["head.weight"], champion.state_dict["head.weight"])


def test_a_frozen_name_that_matches_no_parameter_is_a_recipe_error() -> None:
    frame, labels = reviews(50, seed=0)
    with pytest.raises(RecipeError, match="recipe.freeze"):
        engine.prepare(replace(TEXT_RECIPE, freeze=["decoder"]), TEXT_SCHEMA, frame, labels)


def test_the_learning_rate_warms_up_then_follows_a_cosine_to_zero() -> None:
    factors = [engine.lr_factor(s, warmup=4, total=20, schedule="cosine") for s in range(21)]
    assert factors[:4] == [0.25, 0.5, 0.75, 1.0]
    assert all(a >= b for a, b in zip(factors[4:], factors[5:], strict=False))
    assert factors[20] == pytest.approx(0.0)
    assert engine.lr_factor(10, warmup=4, total=20, schedule="constant") == 1.0


def test_gradient_clipping_bounds_each_update() -> None:
    frame, labels = reviews(120, seed=0)
    plain = replace(TEXT_RECIPE, epochs=1, optimizer="sgd", learning_rate=1.0, warmup_steps=0, grad_clip=0.0)
    clipped = replace(plain, grad_clip=1e-3)
    moved = {}
    for recipe in (plain, clipped):
        prepared = engine.prepare(recipe, TEXT_SCHEMA, frame, labels)
        before = {k: v.clone() for k, v in prepared.module.state_dict().items()}
        after = engine.train(recipe, prepared, engine.TrainingPlan(batch_size=120)).bundle.state_dict
        delta = torch.cat([(after[k] - before[k]).flatten().float() for k in before if "weight" in k])
        moved[recipe.grad_clip] = float(delta.norm())
    assert moved[1e-3] <= 1e-3 * 1.0001 < moved[0.0]  # one SGD step of lr 1: the clipped norm


class Killed(Exception):
    """Stands in for kill -9: the run stops between two steps, its checkpoint written before."""


# 9 steps an epoch, a checkpoint every 2: step 14 is mid-epoch 2, one step past its checkpoint at
# step 13; step 9 is epoch 2's first, its checkpoint epoch 1's end (the next order not drawn yet).
@pytest.mark.parametrize(("kill_at", "checkpoint_at"), [(14, 13), (9, 9)])
def test_a_run_resumed_from_its_checkpoint_ends_with_the_uninterrupted_runs_weights(
    kill_at: int, checkpoint_at: int
) -> None:
    frame, labels = reviews(160, seed=0)
    recipe = replace(TEXT_RECIPE, epochs=3, checkpoint_every_steps=2, schedule="cosine")
    plan = engine.TrainingPlan(batch_size=8, accumulation_steps=2)
    whole = engine.train(recipe, engine.prepare(recipe, TEXT_SCHEMA, frame, labels), plan)

    store, calls = MemoryStore(), iter(range(10_000))

    def die_at_step() -> bool:
        if next(calls) == kill_at:
            raise Killed
        return False

    with pytest.raises(Killed):
        engine.train(recipe, engine.prepare(recipe, TEXT_SCHEMA, frame, labels), plan,
                     checkpoints=store, should_cancel=die_at_step)  # fmt: skip
    assert store.saves >= 3
    resumed = engine.train(
        recipe, engine.prepare(recipe, TEXT_SCHEMA, frame, labels), plan, checkpoints=store
    )
    assert resumed.resumed_at_step == checkpoint_at and resumed.steps == whole.steps
    assert resumed.history == whole.history
    assert all(torch.equal(_weights(resumed)[k], _weights(whole)[k]) for k in _weights(whole))


class _Throttled(MemoryStore):
    """Keeps a checkpoint only every ``every``-th time it is asked (a store with a minimum interval)."""

    def __init__(self, every: int) -> None:
        super().__init__()
        self.every, self.asked = every, 0

    def due(self) -> bool:
        self.asked += 1
        return self.asked % self.every == 1


def test_a_checkpoint_is_built_only_when_the_store_would_keep_it(monkeypatch: pytest.MonkeyPatch) -> None:
    frame, labels = reviews(80, seed=0)
    recipe = replace(TEXT_RECIPE, epochs=6)
    built = []
    dump = checkpoint.dump
    monkeypatch.setattr(checkpoint, "dump", lambda state: built.append(state["steps"]) or dump(state))
    store = _Throttled(every=3)
    engine.train(recipe, engine.prepare(recipe, TEXT_SCHEMA, frame, labels), engine.TrainingPlan(batch_size=8),
                 checkpoints=store)  # fmt: skip
    assert store.asked == 6  # one question an epoch
    assert store.saves == len(built) == 2  # epochs 1 and 4: nothing serialised in between


def test_a_checkpoint_of_other_data_is_ignored_and_the_run_starts_over() -> None:
    frame, labels = reviews(100, seed=0)
    recipe = replace(TEXT_RECIPE, epochs=1)
    store = MemoryStore()
    engine.train(recipe, engine.prepare(recipe, TEXT_SCHEMA, frame, labels), engine.TrainingPlan(batch_size=8),
                 checkpoints=store)  # fmt: skip
    other, other_labels = reviews(100, seed=5)
    again = engine.train(recipe, engine.prepare(recipe, TEXT_SCHEMA, other, other_labels),
                         engine.TrainingPlan(batch_size=8), checkpoints=store)  # fmt: skip
    assert again.resumed_at_step is None and again.steps > 0


def test_the_planner_sizes_a_batch_of_the_longest_texts_and_says_why() -> None:
    frame, labels = reviews(200, seed=0)
    prepared = engine.prepare(TEXT_RECIPE, TEXT_SCHEMA, frame, labels)
    longest = int((prepared.data.inputs["tokens"] != 0).sum(dim=1).max())
    inputs, _ = prepared.data.batch(prepared.data.planning_index(4))
    assert inputs["tokens"].shape == (4, longest)
    plan = engine.plan_training(TEXT_RECIPE, prepared, budget_bytes=2_000_000, saves_checkpoints=True)
    assert plan.longest_input == longest
    assert f"longest input in the data ({longest} tokens)" in plan.reasoning
    assert "checkpoint save" in plan.reasoning


def test_a_training_batch_is_padded_only_to_its_own_longest_text() -> None:
    frame, labels = reviews(50, seed=0)
    data = engine.prepare(TEXT_RECIPE, TEXT_SCHEMA, frame, labels).data
    shortest = torch.argsort(data.lengths())[:3]
    inputs, _ = data.batch(shortest)
    assert inputs["tokens"].shape[1] == int(data.lengths()[shortest].max()) < data.inputs["tokens"].shape[1]


def test_a_custom_adapter_outside_the_allowed_modules_is_refused_before_any_import() -> None:
    with pytest.raises(RecipeNotAllowed, match="recipe.adapter"):
        recipe_from_dict({"name": "text-classification", "adapter": "os:system"}, task="classification")


def test_a_teams_own_model_and_adapter_train_and_load_back_from_an_allowed_module(
    allow_recipe_modules, monkeypatch: pytest.MonkeyPatch
) -> None:
    allow_recipe_modules("tests.workers.training.custom_models")
    recipe = recipe_from_dict(
        {"name": "acme-conv", "factory": "tests.workers.training.custom_models:conv_text_factory",
         "adapter": "tests.workers.training.custom_models:ShortTokens", "hyperparameters": {"width": 8},
         "epochs": 2, "max_batch_size": 16},
        task="classification",
    )  # fmt: skip
    assert recipe.starts_from_champion  # a team's own model fine-tunes by default
    frame, labels = reviews(80, seed=0)
    prepared = engine.prepare(recipe, TEXT_SCHEMA, frame, labels)
    assert prepared.data.inputs["tokens"].shape[1] <= 8
    result = engine.train(recipe, prepared, engine.TrainingPlan(batch_size=16))
    raw = bundle_to_bytes(result.bundle)
    monkeypatch.delitem(sys.modules, CUSTOM)
    assert (
        isinstance(read_bundle(raw).adapter, PendingAdapter) and CUSTOM not in sys.modules
    )  # web: no import
    restored = bundle_from_bytes(raw)
    assert type(restored.adapter).__name__ == "ShortTokens"
    assert np.allclose(Predictor(restored).predict(frame)[1], Predictor(result.bundle).predict(frame)[1])
