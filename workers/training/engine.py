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
import functools
import math
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from workers.memory.optimizers import OptimizerConfig, build_optimizer
from workers.training import checkpoint
from workers.training.adapters import InputAdapter, adapter_class, adapter_for
from workers.training.artifacts import ModelBundle
from workers.training.batches import TensorRows, TrainingData, forward
from workers.training.checkpoint import CheckpointStore
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
    reasoning: str = ""  # why this batch, precision, checkpointing (the job page shows it)
    longest_input: int | None = None  # tokens of the longest text sized for
    checkpoint_bytes: int | None = None

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
    steps_per_epoch: int = 0
    steps_per_second: float | None = None  # this attempt's optimizer steps over its wall time
    measured_peak_bytes: int | None = None


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
    resumed_at_step: int | None = None  # the checkpoint's step this run went on from


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
    adapter: str | None = None,
    start_from: ModelBundle | None = None,
) -> Prepared:
    """Fit the input adapter and target codec (saved with the version) and build the recipe's
    module. ``start_from`` (the champion's bundle) fine-tunes instead: its fitted adapter and
    codec are kept and the module starts from its weights."""
    import torch  # lazy: see the package docstring

    if start_from is None:
        kind = adapter or recipe.adapter or adapter_for(schema["features"])
        inputs = adapter_class(kind).fit(frame, {**schema, "hyperparameters": dict(recipe.hyperparameters)})
        target = TargetCodec.fit(labels, task=schema["task"], classes=schema.get("classes"))
        state = None
    else:
        inputs, target, state = start_from.adapter, start_from.target, start_from.state_dict
    full = {**schema, **inputs.schema_fields(), "output_width": target.width}
    y = torch.from_numpy(target.encode(labels))
    if target.classes is None:
        y = y.reshape(-1, 1)
    data = getattr(inputs, "rows", TensorRows)(inputs.inputs(frame), y)
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
    """``net`` wrapped so that ``model(x, y)`` returns the recipe's loss."""
    return _supervised_class()(net, loss)


@functools.cache
def _supervised_class() -> Any:
    """One class for every job of the process: the planner's trace cache is keyed by the modules'
    classes, and a class made per call missed it on every re-plan of the same recipe."""
    import torch  # lazy: see the package docstring

    losses = {
        "cross_entropy": torch.nn.CrossEntropyLoss,
        "mse": torch.nn.MSELoss,
        "l1": torch.nn.L1Loss,
        "huber": torch.nn.HuberLoss,
    }

    class SupervisedLoss(torch.nn.Module):
        """``model(x, y) -> loss``: the batch carries its labels, the trace sees the loss."""

        def __init__(self, net: Any, loss: str) -> None:
            super().__init__()
            self.net = net
            self.loss = losses[loss]()

        def forward(self, x: Any, y: torch.Tensor) -> torch.Tensor:
            return self.loss(forward(self.net, x), y)

    return SupervisedLoss


def plan_training(
    recipe: Recipe,
    prepared: Prepared,
    *,
    budget_bytes: int,
    device: str = "cpu",
    margin: float | None = None,
    saves_checkpoints: bool = False,
) -> TrainingPlan:
    """Trace the recipe's own training step with ``plan_batch_size`` against ``budget_bytes``,
    on a batch of the largest inputs (the longest texts), and check the moments between steps:
    the evaluation pass runs at the micro-batch without gradients (below the step's peak) and, on
    a CPU device with ``saves_checkpoints``, a checkpoint save (the model, its optimizer state, the best epoch's copy and
    the serialised file) must fit too. ``estimated_bytes`` stays the step's, the figure the
    measured peak is compared with."""
    from workers.memory import plan_batch_size  # lazy: imports torch

    model = supervised(copy.deepcopy(prepared.module), recipe.loss)
    data = prepared.data
    host = not device.startswith("cuda")  # on a GPU, the best copy and the checkpoint are host memory
    sizes = _state_bytes(prepared.module, recipe)

    def make_batch(n: int) -> tuple[Any, Any]:
        return data.batch(data.planning_index(n))  # a batch larger than the data is still a valid shape

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
    # Between two steps (activations and gradients freed) a save holds the model, its optimizer
    # state, the best epoch's weights and the serialised file at once.
    margin = plan.margin  # the planner's: measured per kind of layer unless one was given
    usable = int(budget_bytes * (1.0 - margin))
    saving = sizes["resident"] + sizes["parameters"] + sizes["checkpoint"]
    host = host and saves_checkpoints
    if host and saving > usable:
        raise PlanDoesNotFit(f"saving a checkpoint needs {saving} bytes; {usable} usable")
    longest = int(data.lengths().max()) if hasattr(data, "lengths") and len(data) else None
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
        reasoning=_reasoning(recipe, plan, usable, longest, saving if host else 0),
        longest_input=longest,
        checkpoint_bytes=sizes["checkpoint"],
    )


def _state_bytes(module: Any, recipe: Recipe) -> dict[str, int]:
    """Bytes of the weights, the optimizer's state (Adam: two moments per trained parameter; SGD
    with momentum: one) and the serialised checkpoint of both (the bytes ``torch.save`` writes)."""
    parameters = sum(p.numel() * p.element_size() for p in module.parameters())
    buffers = sum(b.numel() * b.element_size() for b in module.buffers())
    trained = sum(p.numel() * p.element_size() for p in module.parameters() if p.requires_grad)
    moments = {"adam": 2, "adamw": 2}.get(recipe.optimizer, 0)
    state = moments * trained
    # weights + optimizer state + the best epoch's weights, all in the file
    checkpoint = 2 * (parameters + buffers) + state
    return {
        "parameters": parameters + buffers,
        "resident": parameters + buffers + state,
        "checkpoint": checkpoint,
    }


def _reasoning(recipe: Recipe, plan: Any, usable: int, longest: int | None, checkpoint: int) -> str:
    """Why this plan: shown on the job page."""
    parts = [
        f"batch {plan.batch_size}: the largest whose traced training step "
        f"({plan.estimated_bytes:,} bytes) fits the {usable:,} usable ({plan.margin:.0%} margin)"
    ]
    if plan.batch_size >= recipe.max_batch_size:
        parts[0] = (
            f"batch {plan.batch_size}: the recipe's batch fits ({plan.estimated_bytes:,} of {usable:,} usable bytes)"
        )
    if plan.accumulation_steps > 1:
        parts.append(
            f"{plan.accumulation_steps} accumulation steps keep the recipe's batch of {recipe.max_batch_size}"
        )
    if plan.precision != "fp32":
        parts.append(f"{plan.precision} mixed precision: fp32 did not fit at batch 1")
    if plan.checkpointing:
        parts.append("activation checkpointing: the stored activations did not fit at batch 1")
    if longest is not None:
        parts.append(f"sized on the longest input in the data ({longest} tokens)")
    parts.append("evaluation runs at the micro-batch without gradients (under the step's peak)")
    if checkpoint:
        parts.append(
            f"a checkpoint save ({checkpoint:,} bytes with the model and its state) fits between steps"
        )
    return "; ".join(parts)


def recipe_optimizer(recipe: Recipe) -> OptimizerConfig:
    """The recipe's optimizer: what ``train`` steps with and what ``plan_training`` traces."""
    return OptimizerConfig(recipe.optimizer, lr=recipe.learning_rate)


@dataclass
class _State:
    """Where the run is: what a checkpoint holds besides the weights and the optimizer."""

    epoch: int = 1
    position: int = 0  # optimizer steps done in ``epoch``
    epoch_rng: Any = None  # the shuffling generator's state before ``epoch``'s order was drawn
    losses: list[float] = field(default_factory=list)  # this epoch's step losses so far
    history: list[dict[str, Any]] = field(default_factory=list)
    best_loss: float = math.inf
    best_epoch: int = 0
    best_state: Any = None  # on the host: the device holds only what the estimator sized
    stopped_early: bool = False
    resumed_at_step: int | None = None


@dataclass
class _Run:
    recipe: Recipe
    plan: TrainingPlan
    model: Any
    optimizer: Any
    stepper: Any  # what train_step steps: the optimizer, clipping first when the recipe says so
    scheduler: Any
    data: TrainingData  # on the host; each micro-batch is moved to ``device`` alone
    device: Any
    should_cancel: Callable[[], bool]
    on_progress: Callable[[Progress], None]
    memory_cap_bytes: int | None
    generator: Any
    state: _State
    checkpoints: CheckpointStore | None = None
    fingerprint: str = ""
    steps_per_epoch: int = 0
    steps: int = 0
    measured_peak: int | None = None
    clock: Any = None
    started_step: int = 0


def train(
    recipe: Recipe,
    prepared: Prepared,
    plan: TrainingPlan,
    *,
    should_cancel: Callable[[], bool] = lambda: False,
    on_progress: Callable[[Progress], None] = lambda _p: None,
    memory_cap_bytes: int | None = None,
    checkpoints: CheckpointStore | None = None,
) -> TrainingResult:
    """Train ``prepared.module`` under ``plan``; the last ``validation_fraction`` of the rows
    (they are time-ordered) is the early-stopping slice. Deterministic for a recipe's seed.
    With ``checkpoints``, the run checkpoints every epoch (and every
    ``recipe.checkpoint_every_steps`` steps) and resumes from a checkpoint of the same run."""
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
    optimizer = build_optimizer([p for p in model.parameters() if p.requires_grad], recipe_optimizer(recipe))
    per_epoch = math.ceil(len(fit) / (plan.batch_size * plan.accumulation_steps))
    run = _Run(
        recipe=recipe,
        plan=plan,
        model=model,
        optimizer=optimizer,
        stepper=_Clipped(optimizer, recipe.grad_clip) if recipe.grad_clip else optimizer,
        scheduler=lr_schedule(optimizer, recipe, total_steps=per_epoch * recipe.epochs),
        data=fit,
        device=device,
        should_cancel=should_cancel,
        on_progress=on_progress,
        memory_cap_bytes=memory_cap_bytes,
        generator=torch.Generator().manual_seed(recipe.seed),
        state=_State(),
        checkpoints=checkpoints,
        fingerprint=checkpoint.fingerprint(prepared.data, plan, recipe) if checkpoints else "",
        steps_per_epoch=per_epoch,
    )
    _resume(run)
    _cap_cuda(plan, memory_cap_bytes)
    clock, energy = Clock().start(), EnergyMeter(plan.device).start()
    run.clock, run.started_step = clock, run.steps
    _epochs(run, val)
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
    state = run.state
    return TrainingResult(
        bundle=bundle,
        epochs_run=len(state.history),
        best_epoch=state.best_epoch,
        steps=run.steps,
        history=state.history,
        measured_peak_bytes=peak,
        wall_seconds=wall,
        cpu_seconds=clock.cpu(),
        gpu_seconds=wall if device.type == "cuda" else None,
        energy_joules=energy.stop(),
        stopped_early=state.stopped_early,
        resumed_at_step=state.resumed_at_step,
    )


class _Clipped:
    """The optimizer as ``train_step`` steps it, with the gradient norm clipped first."""

    def __init__(self, optimizer: Any, max_norm: float) -> None:
        self.optimizer, self.max_norm = optimizer, max_norm
        self.parameters = [p for group in optimizer.param_groups for p in group["params"]]

    def step(self) -> None:
        import torch  # lazy: see the package docstring

        torch.nn.utils.clip_grad_norm_(self.parameters, self.max_norm)
        self.optimizer.step()

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.optimizer.zero_grad(set_to_none=set_to_none)


def lr_factor(step: int, *, warmup: int, total: int, schedule: str) -> float:
    """The learning rate's multiplier at optimizer step ``step``: linear warm-up over ``warmup``
    steps, then constant or a cosine to 0 at ``total``."""
    if warmup and step < warmup:
        return (step + 1) / warmup
    if schedule != "cosine":
        return 1.0
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return 0.5 * (1.0 + math.cos(math.pi * progress))


def lr_schedule(optimizer: Any, recipe: Recipe, *, total_steps: int) -> Any:
    import torch  # lazy: see the package docstring

    factor = functools.partial(
        lr_factor, warmup=recipe.warmup_steps, total=total_steps, schedule=recipe.schedule
    )
    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def _resume(run: _Run) -> None:
    """Load the run's checkpoint into the model, optimizer, scheduler and RNGs, if there is one."""
    import torch  # lazy: see the package docstring

    saved = checkpoint.read(run.checkpoints.load(), run.fingerprint) if run.checkpoints else None
    if saved is None:
        return
    run.model.load_state_dict(saved["model"])
    run.optimizer.load_state_dict(saved["optimizer"])
    run.scheduler.load_state_dict(saved["scheduler"])
    torch.set_rng_state(saved["torch_rng"])
    run.steps, run.measured_peak = int(saved["steps"]), saved["measured_peak"]
    fields = {k: saved["state"][k] for k in _State.__dataclass_fields__ if k in saved["state"]}
    run.state = _State(**fields)
    run.state.resumed_at_step = run.steps


def _save_checkpoint(run: _Run) -> None:
    import torch  # lazy: see the package docstring

    if run.checkpoints is None or not run.checkpoints.due():
        return
    state = asdict(run.state)
    state["epoch_rng"], state["best_state"] = run.state.epoch_rng, run.state.best_state  # as tensors
    run.checkpoints.save(
        checkpoint.dump(
            {
                "fingerprint": run.fingerprint,
                "model": run.model.state_dict(),
                "optimizer": run.optimizer.state_dict(),
                "scheduler": run.scheduler.state_dict(),
                "torch_rng": torch.get_rng_state(),
                "steps": run.steps,
                "measured_peak": run.measured_peak,
                "state": state,
            }
        )
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


def _epochs(run: _Run, val: TrainingData) -> None:
    state = run.state
    patience = run.recipe.early_stopping_patience
    while state.epoch <= run.recipe.epochs and not state.stopped_early:
        epoch = state.epoch
        train_loss = _one_epoch(run, epoch)
        val_loss = _validate(run, val)
        state.history.append({"epoch": epoch, "loss": train_loss, "val_loss": val_loss})
        run.on_progress(_progress(run, epoch, train_loss, val_loss))
        if val_loss is None:
            state.best_epoch = epoch
        elif val_loss < state.best_loss - 1e-6:
            state.best_loss, state.best_epoch = val_loss, epoch
            state.best_state = {k: v.detach().to("cpu", copy=True) for k, v in run.model.state_dict().items()}
        elif patience and epoch - state.best_epoch >= patience:
            state.stopped_early = True
        # The next epoch's order is drawn from here: an epoch-end checkpoint must carry it (a fresh
        # generator would redraw epoch 1's order after a resume).
        state.epoch, state.position, state.losses = epoch + 1, 0, []
        state.epoch_rng = run.generator.get_state()
        _save_checkpoint(run)
    if state.best_state is not None:
        run.model.load_state_dict(state.best_state)


def _progress(run: _Run, epoch: int, loss: float, val_loss: float | None) -> Progress:
    seconds = run.clock.wall() if run.clock is not None else 0.0
    done = run.steps - run.started_step
    return Progress(
        epoch, run.steps, loss, val_loss, run.recipe.epochs,
        steps_per_epoch=run.steps_per_epoch,
        steps_per_second=done / seconds if seconds > 0 and done else None,
        measured_peak_bytes=run.measured_peak,
    )  # fmt: skip


def _one_epoch(run: _Run, epoch: int) -> float:
    """The epoch's steps from ``state.position`` on; its order is drawn from the generator state
    saved before it was first drawn, so a resumed epoch shuffles as the interrupted one did."""
    import torch  # lazy: see the package docstring

    state, plan = run.state, run.plan
    if state.epoch_rng is None:
        state.epoch_rng = run.generator.get_state()
    else:
        run.generator.set_state(state.epoch_rng)
    order = torch.randperm(len(run.data), generator=run.generator)  # host indices: batches move alone
    per_step = plan.batch_size * plan.accumulation_steps
    every = run.recipe.checkpoint_every_steps
    for i, start in enumerate(range(0, len(order), per_step)):
        if i < state.position:
            continue  # done before the checkpoint this run resumed from
        if run.should_cancel():
            raise TrainingCancelled(f"cancelled at epoch {epoch}, step {run.steps}")
        state.losses.append(_step(run, order[start : start + per_step]))
        run.scheduler.step()
        run.steps += 1
        state.position = i + 1
        if every and state.position % every == 0 and start + per_step < len(order):
            _save_checkpoint(run)
    return float(np.mean(state.losses)) if state.losses else float("nan")


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
            return train_step(run.model, _micro_batches(run, index), run.stepper, **kwargs)
        baseline = live_bytes([*run.model.parameters(), *run.model.buffers(), *_optimizer_state(run)])
        with record_cpu_peak(baseline) as recorder:
            loss = train_step(run.model, _micro_batches(run, index), run.stepper, **kwargs)
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
    """The loss over the whole validation slice, its rows moved to the device a micro-batch at a
    time (the outputs and targets, one row each, are gathered for one mean)."""
    import torch  # lazy: see the package docstring

    if len(val) == 0:
        return None
    size = run.plan.batch_size  # the micro-batch: a larger evaluation batch is an OOM the plan never saw
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
