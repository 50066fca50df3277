"""Training under a memory plan: the same step the estimator traces, with seeds, a time-ordered
validation slice, early stopping, cancellation between steps and progress callbacks.

The module trained is ``SupervisedLoss(net, loss)``: ``model(x, y)`` returns the scalar loss, so
the estimator traces exactly the program that runs (``workers.memory.loop``), and its estimate
is compared with the peak measured here.

Two seams: the input adapter (``adapters``) turns samples into ``TrainingData`` (``batches``),
whose batches are moved to the device one at a time; the module factory (``modules``) builds the
network, fresh or from a bundle's weights (``prepare(..., start_from=champion_bundle)``).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from workers.memory.optimizers import OptimizerConfig, build_optimizer
from workers.training.adapters import DEFAULT_ADAPTER, InputAdapter, adapter_class
from workers.training.artifacts import ModelBundle
from workers.training.batches import TensorRows, TrainingData, forward
from workers.training.measure import Clock, EnergyMeter, live_bytes, record_cpu_peak
from workers.training.modules import module_factory
from workers.training.recipes import Recipe
from workers.training.tabular import TargetCodec

MEASURED_STEPS = 3  # optimizer steps profiled for the CPU peak (Adam's state appears at step 1)


class TrainingCancelled(Exception):
    """The job was cancelled; raised between two steps."""


class TrainingOutOfMemory(Exception):
    """The device ran out of memory (or the peak broke the job's memory cap) under ``plan``."""

    def __init__(self, plan: TrainingPlan, detail: str, measured_bytes: int | None = None) -> None:
        super().__init__(f"out of memory with batch {plan.batch_size} ({plan.precision}): {detail}")
        self.plan = plan
        self.detail = detail
        self.measured_bytes = measured_bytes


class PlanDoesNotFit(Exception):
    """Not even batch 1 (with mixed precision and checkpointing) fits the budget."""


@dataclass(frozen=True)
class TrainingPlan:
    batch_size: int
    precision: str = "fp32"
    checkpointing: bool = False
    accumulation_steps: int = 1
    estimated_bytes: int | None = None
    budget_bytes: int | None = None
    margin: float = 0.10
    device: str = "cpu"
    traces: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Progress:
    """After each epoch: where the run is (``epoch`` of at most ``epochs``) and its losses."""

    epoch: int
    step: int
    loss: float
    val_loss: float | None = None
    epochs: int = 0  # the recipe's budget; early stopping may end the run before it


@dataclass
class TrainingResult:
    bundle: ModelBundle
    epochs_run: int
    best_epoch: int
    steps: int
    history: list[dict[str, Any]]
    measured_peak_bytes: int | None
    wall_seconds: float
    cpu_seconds: float
    gpu_seconds: float | None
    energy_joules: float | None
    stopped_early: bool


@dataclass
class Prepared:
    """The fitted adapter and target codec, the training rows and the module for one recipe and
    one training frame."""

    schema: dict[str, Any]
    adapter: InputAdapter
    target: TargetCodec
    data: TrainingData
    module: Any = field(default=None)
    initial_state: Any = None  # the weights the module started from (None: the factory's fresh ones)


def make_schema(task: str, features: dict[str, str], classes: list[Any] | None) -> dict[str, Any]:
    return {"task": task, "features": dict(features), "classes": list(classes or [])}


def prepare(
    recipe: Recipe,
    schema: dict[str, Any],
    frame: pd.DataFrame,
    labels: list[Any],
    *,
    adapter: str = DEFAULT_ADAPTER,
    start_from: ModelBundle | None = None,
) -> Prepared:
    """Fit the input adapter and target codec (saved with the version) and build the recipe's
    module. ``start_from`` (the champion's bundle) fine-tunes instead: its fitted adapter and
    codec are kept and the module starts from its weights."""
    import torch  # lazy: see the package docstring

    if start_from is None:
        inputs = adapter_class(adapter).fit(frame, schema)
        target = TargetCodec.fit(labels, task=schema["task"], classes=schema.get("classes"))
        state = None
    else:
        inputs, target, state = start_from.adapter, start_from.target, start_from.state_dict
    full = {**schema, **inputs.schema_fields(), "output_width": target.width}
    y = torch.from_numpy(target.encode(labels))
    if target.classes is None:
        y = y.reshape(-1, 1)
    data = TensorRows(inputs.inputs(frame), y)
    torch.manual_seed(recipe.seed)  # the factory's initial weights are part of the determinism
    module = module_factory(recipe).build(full, initial_state=state)
    return Prepared(full, inputs, target, data, module, state)


def restart(recipe: Recipe, prepared: Prepared) -> Prepared:
    """The same rows and preprocessing with the module rebuilt as ``prepare`` built it: a retry
    starts over without refitting the adapter or encoding the rows again."""
    import torch  # lazy: see the package docstring

    torch.manual_seed(recipe.seed)
    module = module_factory(recipe).build(prepared.schema, initial_state=prepared.initial_state)
    return replace(prepared, module=module)


def supervised(net: Any, loss: str) -> Any:
    import torch  # lazy: see the package docstring

    losses = {
        "cross_entropy": torch.nn.CrossEntropyLoss,
        "mse": torch.nn.MSELoss,
        "l1": torch.nn.L1Loss,
        "huber": torch.nn.HuberLoss,
    }

    class SupervisedLoss(torch.nn.Module):
        """``model(x, y) -> loss``: the batch carries its labels, the trace sees the loss."""

        def __init__(self) -> None:
            super().__init__()
            self.net = net
            self.loss = losses[loss]()

        def forward(self, x: Any, y: torch.Tensor) -> torch.Tensor:
            return self.loss(forward(self.net, x), y)

    return SupervisedLoss()


def plan_training(
    recipe: Recipe,
    prepared: Prepared,
    *,
    budget_bytes: int,
    device: str = "cpu",
    margin: float = 0.10,
) -> TrainingPlan:
    """Trace the recipe's own training step with ``plan_batch_size`` against ``budget_bytes``."""
    import torch  # lazy: see the package docstring

    from workers.memory import plan_batch_size  # lazy: imports torch

    model = supervised(copy.deepcopy(prepared.module), recipe.loss)
    data = prepared.data

    def make_batch(n: int) -> tuple[Any, Any]:
        index = torch.arange(n) % len(data)  # a batch larger than the data is still a valid shape
        return data.batch(index)

    plan = plan_batch_size(
        model,
        make_batch,
        budget_bytes,
        max_batch=recipe.max_batch_size,
        target_batch=recipe.max_batch_size,
        optimizer=recipe_optimizer(recipe),
        device="cuda" if device.startswith("cuda") else "cpu",
        margin=margin,
    )
    if not plan.fits:
        raise PlanDoesNotFit(f"batch 1 needs {plan.estimated_bytes} bytes; {plan.usable_bytes} usable")
    return TrainingPlan(
        batch_size=plan.batch_size,
        precision=plan.precision,
        checkpointing=plan.checkpointing,
        accumulation_steps=plan.accumulation_steps,
        estimated_bytes=plan.estimated_bytes,
        budget_bytes=budget_bytes,
        margin=margin,
        device=device,
        traces=plan.traces,
    )


def recipe_optimizer(recipe: Recipe) -> OptimizerConfig:
    """The recipe's optimizer: what ``train`` steps with and what ``plan_training`` traces."""
    return OptimizerConfig(recipe.optimizer, lr=recipe.learning_rate)


@dataclass
class _Run:
    recipe: Recipe
    plan: TrainingPlan
    model: Any
    optimizer: Any
    data: TrainingData  # on the host; each micro-batch is moved to ``device`` alone
    device: Any
    should_cancel: Callable[[], bool]
    on_progress: Callable[[Progress], None]
    memory_cap_bytes: int | None
    generator: Any
    steps: int = 0
    measured_peak: int | None = None


def train(
    recipe: Recipe,
    prepared: Prepared,
    plan: TrainingPlan,
    *,
    should_cancel: Callable[[], bool] = lambda: False,
    on_progress: Callable[[Progress], None] = lambda _p: None,
    memory_cap_bytes: int | None = None,
) -> TrainingResult:
    """Train ``prepared.module`` under ``plan``; the last ``validation_fraction`` of the rows
    (they are time-ordered) is the early-stopping slice. Deterministic for a recipe's seed."""
    import torch  # lazy: see the package docstring

    from workers.memory.checkpointing import apply_activation_checkpointing  # lazy: imports torch

    torch.manual_seed(recipe.seed)
    np.random.seed(recipe.seed)
    device = torch.device(plan.device)
    fit, val = _time_split(prepared.data, recipe.validation_fraction)
    net = prepared.module.to(device)
    if plan.checkpointing:
        apply_activation_checkpointing(net)
    model = supervised(net, recipe.loss).to(device)
    run = _Run(
        recipe=recipe,
        plan=plan,
        model=model,
        optimizer=build_optimizer(
            [p for p in model.parameters() if p.requires_grad], recipe_optimizer(recipe)
        ),
        data=fit,
        device=device,
        should_cancel=should_cancel,
        on_progress=on_progress,
        memory_cap_bytes=memory_cap_bytes,
        generator=torch.Generator().manual_seed(recipe.seed),
    )
    _cap_cuda(plan, memory_cap_bytes)
    clock, energy = Clock().start(), EnergyMeter(plan.device).start()
    history, best_epoch, stopped_early = _epochs(run, val)
    wall = clock.wall()
    peak = run.measured_peak
    if device.type == "cuda":
        peak = int(torch.cuda.max_memory_allocated(device))
    bundle = ModelBundle(
        recipe=recipe,
        schema=prepared.schema,
        adapter=prepared.adapter,
        target=prepared.target,
        state_dict={k: v.detach().cpu().clone() for k, v in _plain_state(net).items()},
    )
    return TrainingResult(
        bundle=bundle,
        epochs_run=len(history),
        best_epoch=best_epoch,
        steps=run.steps,
        history=history,
        measured_peak_bytes=peak,
        wall_seconds=wall,
        cpu_seconds=clock.cpu(),
        gpu_seconds=wall if device.type == "cuda" else None,
        energy_joules=energy.stop(),
        stopped_early=stopped_early,
    )


def _plain_state(net: Any) -> dict[str, Any]:
    # Checkpointing only rebinds forward; the parameter names stay those of the factory's module.
    return dict(net.state_dict())


def _cap_cuda(plan: TrainingPlan, cap: int | None) -> None:
    if cap is None or not plan.device.startswith("cuda"):
        return
    import torch  # lazy: see the package docstring

    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(min(1.0, cap / total))
    torch.cuda.reset_peak_memory_stats()


def _time_split(data: TrainingData, fraction: float) -> tuple[TrainingData, TrainingData]:
    """The most recent ``fraction`` of rows validates; never shuffled across the cut."""
    n_val = int(len(data) * fraction) if fraction > 0 and len(data) >= 20 else 0
    cut = len(data) - n_val
    return data.rows(0, cut), data.rows(cut, len(data))


def _epochs(run: _Run, val: TrainingData) -> tuple[list[dict[str, Any]], int, bool]:
    patience = run.recipe.early_stopping_patience
    best_loss, best_epoch, best_state = math.inf, 0, None
    history: list[dict[str, Any]] = []
    for epoch in range(1, run.recipe.epochs + 1):
        train_loss = _one_epoch(run, epoch)
        val_loss = _validate(run, val)
        history.append({"epoch": epoch, "loss": train_loss, "val_loss": val_loss})
        run.on_progress(Progress(epoch, run.steps, train_loss, val_loss, run.recipe.epochs))
        if val_loss is None:
            best_epoch = epoch
            continue
        if val_loss < best_loss - 1e-6:
            best_loss, best_epoch = val_loss, epoch
            best_state = copy.deepcopy(run.model.state_dict())
        elif patience and epoch - best_epoch >= patience:
            run.model.load_state_dict(best_state)
            return history, best_epoch, True
    if best_state is not None:
        run.model.load_state_dict(best_state)
    return history, best_epoch, False


def _one_epoch(run: _Run, epoch: int) -> float:
    import torch  # lazy: see the package docstring

    plan = run.plan
    order = torch.randperm(len(run.data), generator=run.generator)  # host indices: batches move alone
    per_step = plan.batch_size * plan.accumulation_steps
    losses = []
    for start in range(0, len(order), per_step):
        if run.should_cancel():
            raise TrainingCancelled(f"cancelled at epoch {epoch}, step {run.steps}")
        index = order[start : start + per_step]
        losses.append(_step(run, index))
        run.steps += 1
    return float(np.mean(losses)) if losses else float("nan")


def _micro_batches(run: _Run, index: Any) -> Iterator[tuple[Any, Any]]:
    for start in range(0, len(index), run.plan.batch_size):
        part = index[start : start + run.plan.batch_size]
        yield run.data.batch(part, run.device)


def _step(run: _Run, index: Any) -> float:
    from workers.memory.loop import train_step  # lazy: imports torch

    plan = run.plan
    device_type = run.device.type
    kwargs = dict(accumulation_steps=plan.accumulation_steps, amp=_amp(plan), device_type=device_type)
    try:
        if run.steps >= MEASURED_STEPS or device_type != "cpu":
            return train_step(run.model, _micro_batches(run, index), run.optimizer, **kwargs)
        baseline = live_bytes([*run.model.parameters(), *run.model.buffers(), *_optimizer_state(run)])
        with record_cpu_peak(baseline) as recorder:
            loss = train_step(run.model, _micro_batches(run, index), run.optimizer, **kwargs)
    except torch_oom() as exc:
        raise TrainingOutOfMemory(plan, str(exc)) from exc
    run.measured_peak = max(run.measured_peak or 0, recorder.peak_bytes or 0)
    if run.memory_cap_bytes is not None and run.measured_peak > run.memory_cap_bytes:
        raise TrainingOutOfMemory(
            plan, f"peak {run.measured_peak} bytes over the cap of {run.memory_cap_bytes}", run.measured_peak
        )
    return loss


def _optimizer_state(run: _Run) -> list[Any]:
    return [v for state in run.optimizer.state.values() for v in state.values()]


def torch_oom() -> type[BaseException]:
    import torch  # lazy: see the package docstring

    return torch.OutOfMemoryError


def _amp(plan: TrainingPlan) -> str | None:
    return None if plan.precision == "fp32" else plan.precision


def _validate(run: _Run, val: TrainingData) -> float | None:
    """The loss over the whole validation slice, its rows moved to the device a step's rows at a
    time (the outputs and targets, one row each, are gathered for one mean)."""
    import torch  # lazy: see the package docstring

    if len(val) == 0:
        return None
    size = run.plan.batch_size * run.plan.accumulation_steps
    index = torch.arange(len(val))
    outputs, targets = [], []
    run.model.eval()
    with torch.no_grad():
        for start in range(0, len(val), size):
            x, y = val.batch(index[start : start + size], run.device)
            outputs.append(forward(run.model.net, x))
            targets.append(y)
        loss = float(run.model.loss(torch.cat(outputs), torch.cat(targets)))
    run.model.train()
    return loss
