"""The training seams: input adapters (samples → tensors or dicts of tensors), training data
handed out batch by batch, and module factories that can start from a champion's weights."""

from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import pandas as pd
import pytest
import torch

from workers.training import engine
from workers.training.adapters import ADAPTERS
from workers.training.artifacts import Predictor, bundle_from_bytes, bundle_to_bytes
from workers.training.batches import TensorRows
from workers.training.measure import available_memory_bytes
from workers.training.modules import WeightsDoNotFit
from workers.training.tabular import Encoder


class SplitAdapter:
    """A dict-of-tensors adapter: the numbers and the category flags as two named inputs."""

    kind: ClassVar[str] = "test-split"

    def __init__(self, encoder: Encoder) -> None:
        self.encoder = encoder

    @classmethod
    def fit(cls, frame: pd.DataFrame, schema: dict[str, Any]) -> "SplitAdapter":
        return cls(Encoder.fit(frame, schema["features"]))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "SplitAdapter":
        return cls(Encoder.from_dict(data))

    def to_dict(self) -> dict[str, Any]:
        return self.encoder.to_dict()

    def schema_fields(self) -> dict[str, Any]:
        numbers = len(self.encoder.numerical)
        return {"numbers_width": numbers, "flags_width": self.encoder.width - numbers}

    def inputs(self, frame: pd.DataFrame) -> dict[str, torch.Tensor]:
        x = torch.from_numpy(self.encoder.transform(frame))
        numbers = len(self.encoder.numerical)
        return {"numbers": x[:, :numbers], "flags": x[:, numbers:]}


class TwoInputs(torch.nn.Module):
    def __init__(self, numbers: int, flags: int, classes: int) -> None:
        super().__init__()
        self.numbers = torch.nn.Linear(numbers, 16)
        self.flags = torch.nn.Linear(flags, 16)
        self.head = torch.nn.Linear(16, classes)

    def forward(self, numbers: torch.Tensor, flags: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.numbers(numbers) + self.flags(flags)))


def two_input_factory(schema: dict[str, Any], hyperparameters: dict[str, Any]) -> torch.nn.Module:
    return TwoInputs(schema["numbers_width"], schema["flags_width"], schema["output_width"])


@dataclass(frozen=True)
class RecordingRows(TensorRows):
    """Training rows that remember how many rows each batch they handed out had."""

    seen: list[int] = field(default_factory=list)

    def rows(self, start: int, stop: int) -> "RecordingRows":
        part = super().rows(start, stop)
        return RecordingRows(part.inputs, part.targets, self.seen)

    def batch(self, index: Any, device: Any = "cpu") -> tuple[Any, Any]:
        self.seen.append(len(index))
        return super().batch(index, device)


def test_a_dict_of_tensors_adapter_is_planned_trained_saved_and_served(
    monkeypatch, fast_recipe, churn_schema, churn, allow_recipe_modules
) -> None:
    monkeypatch.setitem(ADAPTERS, SplitAdapter.kind, SplitAdapter)
    allow_recipe_modules("tests.workers.training.test_protocols")
    recipe = replace(fast_recipe, factory="tests.workers.training.test_protocols:two_input_factory")
    frame, labels = churn
    prepared = engine.prepare(recipe, churn_schema, frame, labels, adapter=SplitAdapter.kind)
    plan = engine.plan_training(recipe, prepared, budget_bytes=available_memory_bytes())
    result = engine.train(recipe, prepared, plan)
    assert result.measured_peak_bytes == plan.estimated_bytes
    loaded = bundle_from_bytes(bundle_to_bytes(result.bundle))
    assert isinstance(loaded.adapter, SplitAdapter)
    assert Predictor(loaded).predict(frame)[0] == Predictor(result.bundle).predict(frame)[0]


def test_an_unknown_input_adapter_is_an_error(fast_recipe, churn_schema, churn) -> None:
    frame, labels = churn
    with pytest.raises(ValueError, match="unknown input adapter 'nope'"):
        engine.prepare(fast_recipe, churn_schema, frame, labels, adapter="nope")


def test_each_batch_is_moved_to_the_device_alone(fast_recipe, churn_schema, churn) -> None:
    frame, labels = churn
    prepared = engine.prepare(fast_recipe, churn_schema, frame, labels)
    recording = RecordingRows(prepared.data.inputs, prepared.data.targets)
    plan = engine.TrainingPlan(batch_size=16, accumulation_steps=2)
    engine.train(fast_recipe, replace(prepared, data=recording), plan)
    # 510 training rows in micro-batches of 16 (the last step 16 + 14), the 90 validation rows a
    # micro-batch at a time too (5 × 16, 10: evaluation never exceeds the planned micro-batch).
    assert set(recording.seen) == {16, 14, 10}
    assert sum(recording.seen) == fast_recipe.epochs * len(prepared.data)


def test_training_can_start_from_the_champions_weights(fast_recipe, churn_schema, churn) -> None:
    frame, labels = churn
    plan = engine.TrainingPlan(batch_size=64)
    champion = engine.train(
        fast_recipe, engine.prepare(fast_recipe, churn_schema, frame, labels), plan
    ).bundle
    tuned = engine.prepare(fast_recipe, churn_schema, frame, labels, start_from=champion)
    assert tuned.adapter is champion.adapter and tuned.target is champion.target
    assert all(torch.equal(v, champion.state_dict[k]) for k, v in tuned.module.state_dict().items())
    one_epoch = replace(fast_recipe, epochs=1)
    first: list[engine.Progress] = []
    fresh: list[engine.Progress] = []
    engine.train(one_epoch, tuned, plan, on_progress=first.append)
    engine.train(
        one_epoch, engine.prepare(fast_recipe, churn_schema, frame, labels), plan, on_progress=fresh.append
    )
    assert first[0].loss < fresh[0].loss


def test_a_champion_whose_weights_do_not_fit_the_recipe_is_refused(fast_recipe, churn_schema, churn) -> None:
    frame, labels = churn
    plan = engine.TrainingPlan(batch_size=64)
    champion = engine.train(
        fast_recipe, engine.prepare(fast_recipe, churn_schema, frame, labels), plan
    ).bundle
    wider = replace(fast_recipe, hyperparameters={"hidden": 48, "layers": 2})
    with pytest.raises(WeightsDoNotFit, match="size mismatch"):
        engine.prepare(wider, churn_schema, frame, labels, start_from=champion)


def test_a_restart_rebuilds_the_module_prepare_built(fast_recipe, churn_schema, churn) -> None:
    frame, labels = churn
    prepared = engine.prepare(fast_recipe, churn_schema, frame, labels)
    before = {k: v.clone() for k, v in prepared.module.state_dict().items()}
    engine.train(fast_recipe, prepared, engine.TrainingPlan(batch_size=64))
    again = engine.restart(fast_recipe, prepared).module.state_dict()
    assert all(torch.equal(again[k], v) for k, v in before.items())
    assert not all(torch.equal(prepared.module.state_dict()[k], v) for k, v in before.items())
