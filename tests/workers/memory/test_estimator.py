"""estimate_training_memory against profiler-measured CPU peaks and its modelling switches."""

import pytest
import torch

from tests.workers.memory.conftest import (
    DeepMLP,
    SelfLoss,
    TinyClassifier,
    TinyCNN,
    image_batch,
    measured_cpu_peak,
    table_batch,
    xent,
)
from workers.memory import estimate_training_memory
from workers.memory.allocator import MIB
from workers.memory.checkpointing import apply_activation_checkpointing
from workers.memory.optimizers import OptimizerConfig


def _relative_error(estimate: int, measured: int) -> float:
    return abs(estimate - measured) / measured


@pytest.mark.parametrize("optimizer", ["sgd", "adam", "adamw"])
def test_cpu_estimate_matches_measured_peak_of_an_mlp(optimizer):
    batch = table_batch(64)
    est = estimate_training_memory(TinyClassifier(), batch, loss_fn=xent, optimizer=optimizer, device="cpu")
    measured = measured_cpu_peak(TinyClassifier(), batch, xent, optimizer)
    assert _relative_error(est.peak_allocated_bytes, measured) <= 0.01


def test_plain_sgd_is_estimated_without_the_momentum_buffer_it_never_allocates():
    batch = table_batch(64)
    plain = OptimizerConfig("sgd", lr=0.1)  # torch's default: momentum 0, no optimizer state
    est = estimate_training_memory(TinyClassifier(), batch, loss_fn=xent, optimizer=plain, device="cpu")
    momentum = estimate_training_memory(TinyClassifier(), batch, loss_fn=xent, optimizer="sgd", device="cpu")
    assert est.peak_allocated_bytes == measured_cpu_peak(TinyClassifier(), batch, xent, plain)
    assert est.breakdown.get("optimizer_state", 0) == 0 < momentum.breakdown["optimizer_state"]


def test_cpu_estimate_matches_measured_peak_of_a_cnn_with_batchnorm():
    batch = image_batch(8)
    est = estimate_training_memory(TinyCNN(), batch, loss_fn=xent, optimizer="adam", device="cpu")
    measured = measured_cpu_peak(TinyCNN(), batch, xent, "adam")
    assert _relative_error(est.peak_allocated_bytes, measured) <= 0.02


def test_cpu_estimate_matches_measured_peak_of_an_lstm():
    class Lstm(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = torch.nn.LSTM(16, 32, batch_first=True)
            self.fc = torch.nn.Linear(32, 4)

        def forward(self, x, y=None):
            return self.fc(self.rnn(x)[0][:, -1])

    batch = (torch.randn(8, 20, 16), torch.randint(0, 4, (8,)))
    est = estimate_training_memory(Lstm(), batch, loss_fn=xent, optimizer="sgd", device="cpu")
    measured = measured_cpu_peak(Lstm(), batch, xent, "sgd")
    assert _relative_error(est.peak_allocated_bytes, measured) <= 0.03


def test_breakdown_sums_to_the_cpu_peak():
    est = estimate_training_memory(TinyClassifier(), table_batch(32), loss_fn=xent, device="cpu")
    assert sum(est.breakdown.values()) == est.peak_allocated_bytes
    assert est.peak_reserved_bytes == est.peak_allocated_bytes


def test_breakdown_counts_parameters_and_adam_state():
    model = TinyClassifier()
    param_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    est = estimate_training_memory(model, table_batch(32), loss_fn=xent, optimizer="adam", device="cpu")
    assert est.breakdown["parameters"] == param_bytes
    assert est.breakdown["optimizer_state"] >= 2 * param_bytes


def test_adam_needs_more_memory_than_sgd():
    batch = table_batch(32)
    sgd = estimate_training_memory(TinyClassifier(), batch, loss_fn=xent, optimizer="sgd", device="cpu")
    adam = estimate_training_memory(TinyClassifier(), batch, loss_fn=xent, optimizer="adam", device="cpu")
    assert adam.peak_allocated_bytes > sgd.peak_allocated_bytes


def test_callable_optimizer_is_used():
    calls = []

    def make(params):
        calls.append(1)
        return torch.optim.SGD(params, lr=0.1)

    estimate_training_memory(TinyClassifier(), table_batch(8), loss_fn=xent, optimizer=make, device="cpu")
    assert calls == [1]


def test_the_users_model_is_left_untouched():
    model = TinyClassifier()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    estimate_training_memory(model, table_batch(16), loss_fn=xent, device="cpu")
    assert all(p.grad is None for p in model.parameters())
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert not any(type(p).__name__ == "FakeTensor" for p in model.parameters())


def test_dict_batch_is_passed_as_keyword_arguments_and_scalar_output_is_the_loss():
    batch = {"features": torch.randn(8, 16), "labels": torch.randint(0, 3, (8,))}
    est = estimate_training_memory(SelfLoss(), batch, device="cpu")
    assert est.batch_size == 8
    assert est.peak_allocated_bytes > 0


def test_non_scalar_output_without_loss_fn_is_rejected():
    with pytest.raises(ValueError, match="scalar loss"):
        estimate_training_memory(TinyClassifier(), table_batch(8), device="cpu")


def test_unknown_optimizer_name_is_rejected():
    with pytest.raises(ValueError, match="unknown optimizer"):
        estimate_training_memory(
            TinyClassifier(), table_batch(8), loss_fn=xent, optimizer="lamb", device="cpu"
        )


def test_a_single_iteration_is_rejected():
    with pytest.raises(ValueError, match="two iterations"):
        estimate_training_memory(TinyClassifier(), table_batch(8), loss_fn=xent, device="cpu", iterations=1)


def test_larger_batch_needs_more_activation_memory():
    small = estimate_training_memory(
        DeepMLP(), (torch.randn(16, 256), None), loss_fn=_deep_loss, device="cpu"
    )
    large = estimate_training_memory(
        DeepMLP(), (torch.randn(64, 256), None), loss_fn=_deep_loss, device="cpu"
    )
    assert large.peak_allocated_bytes > small.peak_allocated_bytes


def _deep_loss(output, batch):
    return output.float().pow(2).mean()


def test_checkpointing_lowers_the_peak():
    batch = (torch.randn(256, 256), None)
    plain = estimate_training_memory(DeepMLP(), batch, loss_fn=_deep_loss, optimizer="sgd", device="cpu")
    ckpt = estimate_training_memory(
        DeepMLP(), batch, loss_fn=_deep_loss, optimizer="sgd", device="cpu", checkpointing=True
    )
    assert ckpt.peak_allocated_bytes < plain.peak_allocated_bytes
    assert ckpt.checkpointing


def test_bf16_autocast_keeps_a_weight_cast_cache_and_shrinks_activations():
    batch = (torch.randn(256, 256), None)
    fp32 = estimate_training_memory(DeepMLP(), batch, loss_fn=_deep_loss, optimizer="sgd", device="cpu")
    bf16 = estimate_training_memory(
        DeepMLP(), batch, loss_fn=_deep_loss, optimizer="sgd", device="cpu", amp="bf16"
    )
    assert bf16.peak_allocated_bytes < fp32.peak_allocated_bytes
    assert (
        bf16.breakdown["amp_weight_cache"] > 0
        or bf16.breakdown["activations"] < fp32.breakdown["activations"]
    )


def test_gradient_accumulation_matches_the_measured_peak():
    # The second micro-batch runs its forward while the first one's gradients are alive.
    batch = (torch.randn(32, 256), None)
    est = estimate_training_memory(
        DeepMLP(), batch, loss_fn=_deep_loss, optimizer="sgd", device="cpu", accumulation_steps=2
    )
    measured = measured_cpu_peak(DeepMLP(), batch, _deep_loss, "sgd", accumulation_steps=2)
    assert _relative_error(est.peak_allocated_bytes, measured) <= 0.01


def test_accumulating_half_batches_lowers_an_activation_bound_peak():
    full = (torch.randn(8, 128, 256), None)
    half = (torch.randn(4, 128, 256), None)
    whole = estimate_training_memory(DeepMLP(), full, loss_fn=_deep_loss, optimizer="sgd", device="cpu")
    accum = estimate_training_memory(
        DeepMLP(), half, loss_fn=_deep_loss, optimizer="sgd", device="cpu", accumulation_steps=2
    )
    assert accum.peak_allocated_bytes < 0.75 * whole.peak_allocated_bytes


def test_cuda_estimate_rounds_blocks_and_reserves_at_least_what_it_allocates():
    est = estimate_training_memory(TinyClassifier(), table_batch(32), loss_fn=xent, device="cuda")
    assert est.peak_allocated_bytes % 512 == 0
    assert est.peak_reserved_bytes >= est.peak_allocated_bytes
    assert est.peak_reserved_bytes % (2 * MIB) == 0


def test_cuda_estimate_counts_one_cublas_workspace_per_thread_and_the_context_apart():
    est = estimate_training_memory(TinyClassifier(), table_batch(32), loss_fn=xent, device="cuda")
    assert est.breakdown["workspace"] == 2 * 32 * MIB  # forward thread + autograd thread, sm90
    assert est.breakdown["cuda_context"] > 0
    assert est.device_total_bytes == est.peak_reserved_bytes + est.breakdown["cuda_context"]


def test_cuda_model_uses_bool_dropout_masks():
    model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.Dropout(0.5), torch.nn.Linear(1024, 4))
    batch = torch.randn(512, 256)
    loss = lambda out, b: out.sum()  # noqa: E731
    cpu = estimate_training_memory(model, batch, loss_fn=loss, optimizer="sgd", device="cpu")
    cuda = estimate_training_memory(model, batch, loss_fn=loss, optimizer="sgd", device="cuda")
    mask_fp32, mask_bool = 512 * 1024 * 4, 512 * 1024
    saved = cpu.breakdown["activations"] - (cuda.breakdown["activations"])
    assert saved >= (mask_fp32 - mask_bool) * 0.9


@pytest.mark.parametrize("amp", ["bf16", "fp16"])
def test_autocast_estimate_matches_the_measured_autocast_peak(amp):
    batch = (torch.randn(16, 128, 256), None)
    est = estimate_training_memory(DeepMLP(), batch, loss_fn=_deep_loss, device="cpu", amp=amp)
    measured = measured_cpu_peak(DeepMLP(), batch, _deep_loss, "adam", amp=amp)
    assert _relative_error(est.peak_allocated_bytes, measured) <= 0.01


def test_checkpointing_estimate_matches_the_measured_checkpointed_peak():
    batch = (torch.randn(16, 128, 256), None)
    est = estimate_training_memory(DeepMLP(), batch, loss_fn=_deep_loss, device="cpu", checkpointing=True)
    model = DeepMLP()
    apply_activation_checkpointing(model)
    measured = measured_cpu_peak(model, batch, _deep_loss, "adam")
    assert _relative_error(est.peak_allocated_bytes, measured) <= 0.01


def test_a_storage_resize_holds_old_and_new_buffers_at_once():
    from workers.memory.trace import AllocationRecorder, Trace

    trace = Trace()
    recorder = AllocationRecorder(trace)
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode(), recorder:
        t = torch.empty(1024)
        t.resize_(4096)
    sizes = [e.nbytes for e in trace.events]
    assert sizes[:3] == [4096, 16384, -4096]  # new allocated before the old one is freed


def test_cpu_trace_stops_once_an_iteration_leaves_what_the_one_before_left():
    def estimate(iterations):
        return estimate_training_memory(
            TinyCNN(), image_batch(8), loss_fn=xent, optimizer="adam", device="cpu", iterations=iterations
        )

    two, five = estimate(2), estimate(5)
    assert five.peak_allocated_bytes == two.peak_allocated_bytes
    assert five.trace_events == two.trace_events  # iterations 3-5 would repeat iteration 2


class _LateStateSGD(torch.optim.SGD):
    """Adds a large state tensor per parameter at its third step only."""

    def __init__(self, params):
        super().__init__(params, lr=0.01)
        self.steps = 0

    @torch.no_grad()
    def step(self, closure=None):
        self.steps += 1
        if self.steps == 3:
            for group in self.param_groups:
                for p in group["params"]:
                    self.state[p]["late"] = torch.zeros(p.numel() * 8, dtype=p.dtype, device=p.device)
        return super().step(closure)


def test_a_callable_optimizer_is_traced_for_every_iteration():
    def estimate(iterations):
        return estimate_training_memory(
            TinyClassifier(),
            table_batch(16),
            loss_fn=xent,
            optimizer=_LateStateSGD,
            device="cpu",
            iterations=iterations,
        )

    assert estimate(3).peak_allocated_bytes > estimate(2).peak_allocated_bytes
