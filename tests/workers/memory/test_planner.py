"""plan_batch_size: largest fitting batch, verified by a trace, and its alternatives."""

import time

import torch
from torch._subclasses.fake_tensor import FakeTensor

from tests.workers.memory.conftest import DeepMLP, TinyClassifier, table_batch, xent
from workers.memory import estimate_training_memory, plan_batch_size
from workers.memory.allocator import MIB
from workers.memory.planner import clear_trace_cache


def _cpu_peak(model, batch_size, **kwargs):
    return estimate_training_memory(
        model, table_batch(batch_size), loss_fn=xent, device="cpu", iterations=2, **kwargs
    ).peak_allocated_bytes


def test_plan_picks_the_largest_batch_that_fits_the_usable_budget():
    model = TinyClassifier()
    plan = plan_batch_size(model, table_batch, 400_000, loss_fn=xent, device="cpu", max_batch=100_000)
    assert plan.fits
    assert _cpu_peak(model, plan.batch_size) <= plan.usable_bytes
    assert _cpu_peak(model, plan.batch_size + 1) > plan.usable_bytes


def test_plan_keeps_the_stated_safety_margin():
    plan = plan_batch_size(TinyClassifier(), table_batch, 400_000, loss_fn=xent, device="cpu", margin=0.25)
    assert plan.usable_bytes == 300_000
    assert plan.estimated_bytes <= 300_000


def test_plan_is_capped_by_max_batch():
    plan = plan_batch_size(TinyClassifier(), table_batch, 10**9, loss_fn=xent, device="cpu", max_batch=48)
    assert plan.batch_size == 48


def test_plan_needs_only_a_few_traces():
    plan = plan_batch_size(
        TinyClassifier(), table_batch, 2_000_000, loss_fn=xent, device="cpu", max_batch=100_000
    )
    assert plan.traces <= 8


def test_plan_for_a_small_tabular_mlp_on_a_gpu_is_fast():
    started = time.perf_counter()
    plan = plan_batch_size(
        TinyClassifier(), table_batch, 2 * 1024 * MIB, loss_fn=xent, device="cuda", max_batch=4096
    )
    assert plan.fits and plan.batch_size == 4096
    assert time.perf_counter() - started < 10


def test_accumulation_keeps_the_effective_batch():
    plan = plan_batch_size(
        TinyClassifier(), table_batch, 400_000, loss_fn=xent, device="cpu", target_batch=4096
    )
    assert plan.batch_size < 4096
    assert plan.batch_size * plan.accumulation_steps >= 4096
    assert plan.batch_size * (plan.accumulation_steps - 1) < 4096


def _long_rows(n):
    return torch.randn(n, 512, 256), None


def _mean_square(output, batch):
    return output.float().pow(2).mean()


def test_alternatives_are_offered_when_batch_one_does_not_fit_at_full_precision():
    model = DeepMLP()
    kwargs = dict(loss_fn=_mean_square, optimizer="sgd", device="cpu", iterations=2)
    fp32 = estimate_training_memory(model, _long_rows(1), **kwargs).peak_allocated_bytes
    ckpt = estimate_training_memory(model, _long_rows(1), checkpointing=True, **kwargs).peak_allocated_bytes
    budget = int((fp32 + ckpt) / 2 / 0.9)  # between the two, after the 10% margin
    plan = plan_batch_size(
        model, _long_rows, budget, loss_fn=_mean_square, optimizer="sgd", device="cpu", margin=0.10
    )
    assert plan.fits
    assert plan.precision != "fp32" or plan.checkpointing
    assert any(
        not option.fits and option.precision == "fp32" and not option.checkpointing
        for option in plan.alternatives
    )


def test_nothing_fits_is_reported_not_hidden():
    plan = plan_batch_size(TinyClassifier(), table_batch, 1000, loss_fn=xent, device="cpu")
    assert not plan.fits
    assert plan.batch_size == 0
    # Checkpointing always; mixed precision (with and without it) only where oneDNN runs one natively.
    native = torch.ops.mkldnn._is_mkldnn_bf16_supported() or torch.ops.mkldnn._is_mkldnn_fp16_supported()
    tried = {(o.precision, o.checkpointing) for o in plan.alternatives}
    assert ("fp32", True) in tried
    assert len(plan.alternatives) == (3 if native else 1)


def test_plan_starts_from_the_requested_precision():
    plan = plan_batch_size(
        TinyClassifier(), table_batch, 400_000, loss_fn=xent, device="cpu", precision="bf16"
    )
    assert plan.fits
    assert plan.precision == "bf16"
    assert plan.estimate is not None and plan.estimate.amp == "bf16"


# -- CPU / on-device budgets (training on an edge or CPU box) ------------------------------------
class _LongSequenceMLP(torch.nn.Module):
    """Per-sample activations dominate: 2048 tokens x 512 wide through 6 blocks."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList(
            torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.GELU()) for _ in range(6)
        )
        self.head = torch.nn.Linear(512, 4)

    def forward(self, x, y=None):
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def _sequences(n: int):
    return torch.randn(n, 2048, 512), None


def _mean_loss(out, batch):
    return out.float().pow(2).mean()


def test_cpu_budget_plan_fits_a_phone_class_budget_with_accumulation():
    budget = 512 * MIB
    plan = plan_batch_size(
        TinyClassifier(256, 1024),
        lambda n: table_batch(n, 256),
        budget,
        device="cpu",
        loss_fn=xent,
        target_batch=4096,
    )
    assert plan.fits and plan.device == "cpu"
    assert plan.estimated_bytes <= plan.usable_bytes
    assert plan.batch_size * plan.accumulation_steps >= 4096
    est = estimate_training_memory(
        TinyClassifier(256, 1024), table_batch(plan.batch_size, 256), loss_fn=xent, device="cpu"
    )
    assert est.peak_allocated_bytes <= budget  # a CPU estimate is the live-bytes peak, no allocator cache


def test_cpu_budget_offers_mixed_precision_and_checkpointing_when_one_sample_does_not_fit():
    budget = 64 * MIB  # one fp32 sample needs ~75 MiB: 24 MiB of weights and Adam, ~50 MiB of activations
    plan = plan_batch_size(
        _LongSequenceMLP(), _sequences, budget, device="cpu", loss_fn=_mean_loss, max_batch=4
    )
    configs = {(o.precision, o.checkpointing) for o in (*plan.alternatives,)} | {
        (plan.precision, plan.checkpointing)
    }
    assert ("fp32", False) in configs and ("fp32", True) in configs
    assert plan.fits and (plan.precision != "fp32" or plan.checkpointing)
    if torch.ops.mkldnn._is_mkldnn_bf16_supported():
        assert ("bf16", False) in configs  # mixed precision is offered where the CPU runs it


def test_the_planner_never_generates_a_batch_s_rows():
    # A cold plan: test_plan_needs_only_a_few_traces plans the same model, budget and shapes, and
    # a warm cache would trace nothing here (the traces are what this test looks at).
    clear_trace_cache()
    built: list[bool] = []

    def make_batch(n: int):
        x, y = table_batch(n)
        built.append(isinstance(x, FakeTensor))
        return x, y

    plan = plan_batch_size(
        TinyClassifier(), make_batch, 2_000_000, loss_fn=xent, device="cpu", max_batch=100_000
    )
    assert plan.fits and plan.traces >= 1 and len(built) >= plan.traces
    assert all(built)  # only shapes: no random number (or gathered row) behind any traced batch


def test_a_batch_that_needs_its_values_is_built_for_real_and_planned_the_same():
    calls: list[bool] = []

    def masked(n: int):
        # A boolean mask's result has a data-dependent shape: fake tensors cannot build it.
        x, y = table_batch(n + 4)
        keep = torch.arange(n + 4) >= 4
        calls.append(isinstance(x, FakeTensor))
        return x[keep], y[keep]

    kwargs = dict(loss_fn=xent, device="cpu", max_batch=100_000)
    clear_trace_cache()
    plain = plan_batch_size(TinyClassifier(), table_batch, 400_000, **kwargs)
    clear_trace_cache()
    plan = plan_batch_size(TinyClassifier(), masked, 400_000, **kwargs)
    assert False in calls  # the fake attempt failed and the real batch was built
    assert (plan.batch_size, plan.estimated_bytes, plan.traces) == (
        plain.batch_size,
        plain.estimated_bytes,
        plain.traces,
    )
