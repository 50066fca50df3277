from dataclasses import replace

import numpy as np
import pytest
import torch

from workers.memory.planner import clear_trace_cache
from workers.training import engine
from workers.training.artifacts import Predictor, bundle_to_bytes
from workers.training.measure import EnergyMeter, available_memory_bytes


def _train(recipe, schema, churn, plan=None, **kwargs):
    frame, labels = churn
    prepared = engine.prepare(recipe, schema, frame, labels)
    return engine.train(recipe, prepared, plan or engine.TrainingPlan(batch_size=64), **kwargs)


def test_same_seed_gives_identical_weights(fast_recipe, churn_schema, churn) -> None:
    first = _train(fast_recipe, churn_schema, churn).bundle.state_dict
    second = _train(fast_recipe, churn_schema, churn).bundle.state_dict
    assert all(torch.equal(first[k], second[k]) for k in first)


def test_progress_is_reported_every_epoch(fast_recipe, churn_schema, churn) -> None:
    seen = []
    _train(fast_recipe, churn_schema, churn, on_progress=seen.append)
    assert [p.epoch for p in seen] == [1, 2, 3, 4]
    assert {p.epochs for p in seen} == {fast_recipe.epochs}
    assert all(p.val_loss is not None and np.isfinite(p.loss) for p in seen)


def test_cancellation_is_honoured_between_steps(fast_recipe, churn_schema, churn) -> None:
    calls = []

    def should_cancel() -> bool:
        calls.append(1)
        return len(calls) > 3

    with pytest.raises(engine.TrainingCancelled):
        _train(fast_recipe, churn_schema, churn, should_cancel=should_cancel)
    assert len(calls) == 4


def test_early_stopping_stops_when_validation_stops_improving(fast_recipe, churn_schema, churn) -> None:
    recipe = replace(fast_recipe, epochs=200, early_stopping_patience=2, learning_rate=0.05)
    result = _train(recipe, churn_schema, churn)
    assert result.stopped_early and result.epochs_run < 200
    assert result.epochs_run - result.best_epoch == 2


def test_plan_comes_from_the_estimator_within_the_budget(fast_recipe, churn_schema, churn) -> None:
    frame, labels = churn
    prepared = engine.prepare(fast_recipe, churn_schema, frame, labels)
    plan = engine.plan_training(fast_recipe, prepared, budget_bytes=40_000, margin=0.1)
    assert 0 < plan.batch_size < fast_recipe.max_batch_size
    assert plan.estimated_bytes <= 36_000
    assert plan.accumulation_steps * plan.batch_size >= fast_recipe.max_batch_size


def test_a_re_plan_of_the_same_recipe_traces_nothing_again(fast_recipe, churn_schema, churn) -> None:
    # The planner caches traces by the modules' classes: the supervised wrapper must be one class.
    frame, labels = churn
    prepared = engine.prepare(fast_recipe, churn_schema, frame, labels)
    clear_trace_cache()
    first = engine.plan_training(fast_recipe, prepared, budget_bytes=40_000, margin=0.1)
    again = engine.plan_training(fast_recipe, prepared, budget_bytes=40_000, margin=0.1)
    assert first.traces >= 2 and again.traces == 0
    assert (again.batch_size, again.estimated_bytes) == (first.batch_size, first.estimated_bytes)


def test_measured_peak_matches_the_estimate(fast_recipe, churn_schema, churn) -> None:
    frame, labels = churn
    prepared = engine.prepare(fast_recipe, churn_schema, frame, labels)
    plan = engine.plan_training(fast_recipe, prepared, budget_bytes=available_memory_bytes())
    result = engine.train(fast_recipe, prepared, plan)
    assert abs(result.measured_peak_bytes - plan.estimated_bytes) / plan.estimated_bytes < 0.05


def test_an_sgd_recipe_is_sized_for_the_optimizer_training_builds(fast_recipe, churn_schema, churn) -> None:
    # Plain SGD (the recipe sets no momentum) keeps no state: no phantom momentum buffer is sized.
    recipe = replace(fast_recipe, optimizer="sgd")
    frame, labels = churn
    prepared = engine.prepare(recipe, churn_schema, frame, labels)
    plan = engine.plan_training(recipe, prepared, budget_bytes=available_memory_bytes())
    result = engine.train(recipe, prepared, plan)
    assert result.measured_peak_bytes == plan.estimated_bytes


def test_peak_over_the_memory_cap_raises_oom_with_its_plan(fast_recipe, churn_schema, churn) -> None:
    plan = engine.TrainingPlan(batch_size=64, estimated_bytes=50_000)
    with pytest.raises(engine.TrainingOutOfMemory) as info:
        _train(fast_recipe, churn_schema, churn, plan=plan, memory_cap_bytes=10_000)
    assert info.value.plan == plan and info.value.measured_bytes > 10_000


def test_accumulation_and_bf16_plan_trains(fast_recipe, churn_schema, churn) -> None:
    plan = engine.TrainingPlan(batch_size=16, accumulation_steps=4, precision="bf16")
    result = _train(fast_recipe, churn_schema, churn, plan=plan)
    assert result.steps == 4 * int(np.ceil(510 / 64))


def test_training_learns_the_churn_task(churn_schema, churn, fast_recipe) -> None:
    recipe = replace(fast_recipe, epochs=20)
    predictor = Predictor.from_bytes(bundle_to_bytes(_train(recipe, churn_schema, churn).bundle))
    frame, labels = churn
    accuracy = np.mean([p == y for p, y in zip(predictor.predict(frame)[0], labels, strict=True)])
    majority = max(labels.count("stay"), labels.count("churn")) / len(labels)
    assert accuracy > majority + 0.02


def test_regression_recipe_beats_predicting_the_mean(regression_data) -> None:
    frame, target, schema, recipe = regression_data
    prepared = engine.prepare(recipe, schema, frame, target)
    result = engine.train(recipe, prepared, engine.TrainingPlan(batch_size=64))
    predictions, proba = Predictor(result.bundle).predict(frame)
    mae = np.mean(np.abs(np.asarray(predictions) - target))
    assert proba is None and mae < 0.5 * np.mean(np.abs(np.asarray(target) - np.mean(target)))


def test_raising_factory_is_reported_as_a_recipe_error(
    fast_recipe, churn_schema, churn, allow_recipe_modules
) -> None:
    from workers.training.recipes import RecipeError

    allow_recipe_modules("tests.workers.training.test_engine")
    with pytest.raises(RecipeError, match="ZeroDivisionError"):
        _train(
            replace(fast_recipe, factory="tests.workers.training.test_engine:broken_factory"),
            churn_schema,
            churn,
        )


def broken_factory(schema, hyperparameters):
    return 1 / 0


def test_energy_is_none_without_a_readable_counter(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr("workers.training.measure.RAPL_ROOT", tmp_path)
    meter = EnergyMeter("cpu").start()
    assert meter.stop() is None
