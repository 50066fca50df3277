"""The canonical training iteration whose memory the estimator predicts.

The estimator traces exactly this loop on fake tensors, and the accuracy benchmark runs it on real
ones, so what is predicted and what is measured are the same program. A training worker that
wants the estimate to hold should step the same way (drop the output before backward, zero grads
with ``set_to_none=True``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Protocol

import torch

# Re-exported: the loop's callers (estimator, benches, tests) build their optimizer from here.
from workers.memory.optimizers import OptimizerSpec, build_optimizer  # noqa: F401

Batch = Any  # a tensor, a tuple/list of tensors or a dict of tensors; dim 0 is the batch
LossFn = Callable[[Any, Batch], torch.Tensor]
PhaseHook = Callable[[str, int], contextlib.AbstractContextManager[None]]

AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


class Stepper(Protocol):
    """What the loop calls of an optimizer (the estimator may hand it a stand-in:
    ``workers.memory.step_replay``)."""

    def step(self) -> Any: ...

    def zero_grad(self, set_to_none: bool = True) -> None: ...


def call_model(model: torch.nn.Module, batch: Batch) -> Any:
    """``model(batch)``, ``model(*batch)`` or ``model(**batch)`` depending on the batch type."""
    if isinstance(batch, Mapping):
        return model(**batch)
    if isinstance(batch, tuple | list):
        return model(*batch)
    return model(batch)


def compute_loss(output: Any, batch: Batch, loss_fn: LossFn | None) -> torch.Tensor:
    if loss_fn is not None:
        return loss_fn(output, batch)
    # Hugging Face models return a ModelOutput carrying the loss when labels are in the batch.
    loss = getattr(output, "loss", None)
    if loss is None and isinstance(output, Mapping):
        loss = output.get("loss")
    loss = output if loss is None else loss
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        raise ValueError("without loss_fn the model output must be the scalar loss")
    return loss


@contextlib.contextmanager
def _no_phase(_name: str, _iteration: int) -> Iterator[None]:
    yield


def autocast_context(amp: str | None, device_type: str) -> contextlib.AbstractContextManager[Any]:
    if amp is None or amp == "fp32":
        return contextlib.nullcontext()
    if amp not in AMP_DTYPES:
        raise ValueError(f"amp must be None, 'bf16' or 'fp16', not {amp!r}")
    return torch.autocast(device_type=device_type, dtype=AMP_DTYPES[amp])


def run_training(
    model: torch.nn.Module,
    batch: Batch,
    optimizer: Stepper,
    *,
    loss_fn: LossFn | None = None,
    iterations: int = 3,
    accumulation_steps: int = 1,
    amp: str | None = None,
    device_type: str = "cpu",
    phase: PhaseHook = _no_phase,
    stop_after: Callable[[int], bool] | None = None,
) -> None:
    """Forward, loss, backward (``accumulation_steps`` times), optimizer step, zero_grad;
    ``iterations`` times, or until ``stop_after(iteration)`` says the rest would repeat it."""
    model.train()
    for iteration in range(iterations):
        for _ in range(accumulation_steps):
            _forward_backward(model, batch, loss_fn, accumulation_steps, amp, device_type, phase, iteration)
        with phase("optimizer", iteration):
            optimizer.step()
        with phase("zero_grad", iteration):
            optimizer.zero_grad(set_to_none=True)
        if stop_after is not None and stop_after(iteration):
            return


def train_step(
    model: torch.nn.Module,
    micro_batches: Iterable[Batch],
    optimizer: torch.optim.Optimizer,
    *,
    accumulation_steps: int,
    loss_fn: LossFn | None = None,
    amp: str | None = None,
    device_type: str = "cpu",
) -> float:
    """One optimizer step of real training, stepping exactly as :func:`run_training` does (so the
    estimate of that loop holds), over ``accumulation_steps`` distinct micro-batches drawn lazily
    (one alive at a time, as in the trace). Returns the mean loss of the micro-batches."""
    losses: list[float] = []
    for batch in micro_batches:
        _forward_backward(model, batch, loss_fn, accumulation_steps, amp, device_type, _no_phase, 0, losses)
    if amp == "fp16":
        for param in model.parameters():  # undo the fixed loss scale before the step
            if param.grad is not None:
                param.grad.div_(1024.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return float(sum(losses)) if losses else float("nan")


def _forward_backward(
    model: torch.nn.Module,
    batch: Batch,
    loss_fn: LossFn | None,
    accumulation_steps: int,
    amp: str | None,
    device_type: str,
    phase: PhaseHook,
    iteration: int,
    losses: list[float] | None = None,
) -> None:
    with phase("forward", iteration):
        with autocast_context(amp, device_type):
            output = call_model(model, batch)
            loss = compute_loss(output, batch, loss_fn)
        del output  # activations stay alive through the autograd graph, not the output object
        if accumulation_steps > 1:
            loss = loss / accumulation_steps
        if amp == "fp16":
            loss = loss * 1024.0  # stands in for GradScaler.scale(): one more scalar
    with phase("backward", iteration):
        loss.backward()
    if losses is not None:  # real training only, read as a number: no tensor outlives the trace's
        losses.append(float(loss.detach()) / (1024.0 if amp == "fp16" else 1.0))
    del loss
