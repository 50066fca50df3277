"""workers.memory.step_replay: a trace that replays another's optimizer steps equals a full trace."""

import pytest
import torch
import torch.nn as nn

from tests.workers.memory.conftest import DeepMLP, TinyClassifier, TinyCNN, image_batch, table_batch, xent
from workers.memory import plan_batch_size
from workers.memory.cuda_model import CudaTarget
from workers.memory.estimator import estimate_and_trace
from workers.memory.optimizers import OptimizerConfig


def _traces(model, make_batch, probe, batch, **kwargs):
    kwargs = {"loss_fn": xent, "iterations": 2, **kwargs}
    _, recorded = estimate_and_trace(model, make_batch(probe), **kwargs)
    full_estimate, full = estimate_and_trace(model, make_batch(batch), **kwargs)
    replayed_estimate, replayed = estimate_and_trace(
        model, make_batch(batch), step_replay=recorded.step_replay, **kwargs
    )
    return recorded, (full_estimate, full), (replayed_estimate, replayed)


@pytest.mark.parametrize(
    "model, make_batch, kwargs",
    [
        (TinyClassifier(), table_batch, {"device": "cpu", "optimizer": "adam"}),
        (
            DeepMLP(width=64, depth=3),
            lambda n: (torch.randn(n, 64), torch.randint(0, 4, (n,))),
            {"device": "cpu", "optimizer": OptimizerConfig("adamw", options={"weight_decay": 0.01})},
        ),  # fmt: skip
        (TinyCNN(), image_batch, {"device": "cpu", "optimizer": "sgd"}),
        (TinyCNN(), image_batch, {"device": "cuda", "optimizer": "adam", "cuda_target": CudaTarget()}),
        (TinyClassifier(), table_batch, {"device": "cpu", "optimizer": "adam", "checkpointing": True}),
        (TinyClassifier(), table_batch, {"device": "cpu", "optimizer": "adam", "accumulation_steps": 2}),
    ],
    ids=["mlp-adam-cpu", "mlp-adamw-cpu", "cnn-sgd-cpu", "cnn-adam-cuda", "checkpointed", "accumulated"],
)
def test_a_replayed_trace_is_the_full_trace_event_for_event(model, make_batch, kwargs):
    recorded, (full_estimate, full), (replayed_estimate, replayed) = _traces(
        model, make_batch, 3, 11, **kwargs
    )
    assert recorded.step_replay is not None and recorded.step_replay.repeats
    assert replayed.events == full.events  # storage ids, sizes, ops, phases and iterations
    assert replayed.category == full.category and replayed.host == full.host
    assert replayed_estimate.peak_allocated_bytes == full_estimate.peak_allocated_bytes
    assert replayed_estimate.peak_reserved_bytes == full_estimate.peak_reserved_bytes
    assert replayed_estimate.breakdown == full_estimate.breakdown
    # It is a replay: the optimizer steps' events appear without the steps having run.
    assert any(e.phase == "optimizer" for e in replayed.events)


class BigBatchHead(nn.Module):
    """A second head used only on batches of more than 16 rows: its weights get a gradient (and Adam
    state) there and nowhere else, so the optimizer step differs with the batch."""

    def __init__(self) -> None:
        super().__init__()
        self.small = nn.Linear(32, 4)
        self.big = nn.Linear(32, 4)

    def forward(self, x, y=None):
        return self.small(x) + (self.big(x) if x.shape[0] > 16 else 0)


def test_a_step_that_differs_with_the_batch_is_traced_not_replayed():
    recorded, (full_estimate, full), (replayed_estimate, replayed) = _traces(
        BigBatchHead(), table_batch, 3, 40, device="cpu", optimizer="adam"
    )
    assert recorded.step_replay is not None  # recorded at 3 rows, where the big head has no gradient
    assert replayed.events == full.events
    assert replayed_estimate.peak_allocated_bytes == full_estimate.peak_allocated_bytes
    assert replayed_estimate.breakdown["optimizer_state"] == full_estimate.breakdown["optimizer_state"] > 0


class Growing(nn.Module):
    """Python state: each forward pass holds a wider activation than the one before (a call counter)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(32, 4)
        self.calls = 0

    def forward(self, x, y=None):
        self.calls += 1
        wide = x.repeat(1, 16 * self.calls) * 2.0  # kept by autograd for backward: an activation
        return self.lin(x) + wide[:, :4]


def test_an_iteration_that_differs_from_the_first_is_traced_not_repeated():
    recorded, (full_estimate, full), (replayed_estimate, replayed) = _traces(
        Growing(), table_batch, 3, 40, device="cpu", optimizer="adam"
    )
    assert recorded.step_replay is not None and not recorded.step_replay.repeats
    assert replayed.events == full.events
    assert replayed_estimate.peak_allocated_bytes == full_estimate.peak_allocated_bytes


def test_a_recording_of_another_model_falls_back_to_the_full_trace():
    _, other = estimate_and_trace(TinyCNN(), image_batch(3), loss_fn=xent, device="cpu", iterations=2)
    model = TinyClassifier()
    full_estimate, full = estimate_and_trace(model, table_batch(9), loss_fn=xent, device="cpu", iterations=2)
    estimate, trace = estimate_and_trace(
        model, table_batch(9), loss_fn=xent, device="cpu", iterations=2, step_replay=other.step_replay
    )
    assert trace.events == full.events
    assert estimate.peak_allocated_bytes == full_estimate.peak_allocated_bytes


def test_a_callable_optimizer_is_never_recorded():
    _, trace = estimate_and_trace(
        TinyClassifier(),
        table_batch(4),
        loss_fn=xent,
        device="cpu",
        iterations=2,
        optimizer=lambda params: torch.optim.SGD(params, lr=0.1),
    )
    assert trace.step_replay is None


def test_the_plan_with_replayed_steps_is_the_plan_of_full_traces(monkeypatch):
    from workers.memory import planner

    def plan():
        planner.clear_trace_cache()
        return plan_batch_size(TinyCNN(), image_batch, 6_000_000, loss_fn=xent, device="cpu", max_batch=4096)

    replayed = plan()
    full_trace = planner.estimate_and_trace
    monkeypatch.setattr(planner, "estimate_and_trace", lambda *a, step_replay=None, **k: full_trace(*a, **k))
    full = plan()
    assert replayed.traces >= 2
    assert (replayed.batch_size, replayed.estimated_bytes) == (full.batch_size, full.estimated_bytes)
