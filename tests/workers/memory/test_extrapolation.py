"""Traces extrapolated in the batch size, and the planner's trace cache."""

import pytest
import torch

from tests.workers.memory.conftest import TinyClassifier, TinyCNN, image_batch, table_batch, xent
from workers.memory.estimator import estimate_and_trace
from workers.memory.extrapolation import BatchLine, pairable, profile_of
from workers.memory.planner import clear_trace_cache, plan_batch_size


def _profile(model, make_batch, n, device="cpu"):
    batch = make_batch(n)
    est, trace = estimate_and_trace(model, batch, loss_fn=xent, device=device, iterations=2)
    return est, profile_of(trace, n, batch, keep_trace=device == "cuda")


@pytest.fixture(autouse=True)
def _cold_cache():
    clear_trace_cache()
    yield
    clear_trace_cache()


@pytest.mark.parametrize(("model", "make_batch"), [(TinyClassifier, table_batch), (TinyCNN, image_batch)])
def test_lines_through_two_traces_predict_a_third_exactly(model, make_batch):
    net = model()
    _, p = _profile(net, make_batch, 16)
    _, q = _profile(net, make_batch, 32)
    est, r = _profile(net, make_batch, 300)
    assert pairable(p, q) and pairable(p, r)
    line = BatchLine(p, q)
    assert torch.equal(line.sizes(300), r.sizes)
    assert line.peak(300) == est.peak_allocated_bytes


def test_lines_replay_the_cuda_allocator_like_a_trace():
    net = TinyClassifier()
    _, p = _profile(net, table_batch, 16, "cuda")
    _, q = _profile(net, table_batch, 32, "cuda")
    est, _ = _profile(net, table_batch, 500, "cuda")
    from workers.memory.cuda_model import CudaTarget, simulate

    _, reserved, _ = simulate(BatchLine(p, q).trace_at(500), CudaTarget(), None)
    assert reserved == est.peak_reserved_bytes


def _sum(output, batch):
    return output.sum()


def test_traces_of_other_non_batch_shapes_do_not_pair():
    """A batch padded to a longer sequence runs the same ops: its sizes are not a line in the rows."""
    net = torch.nn.Linear(32, 8)
    profiles = {}
    for rows, seq in [(16, 4), (32, 4), (32, 8)]:
        batch = torch.randn(rows, seq, 32)
        _, trace = estimate_and_trace(net, batch, loss_fn=_sum, device="cpu", iterations=2)
        profiles[rows, seq] = profile_of(trace, rows, batch, keep_trace=False)
    assert profiles[16, 4].structure == profiles[32, 8].structure
    assert pairable(profiles[16, 4], profiles[32, 4])
    assert not pairable(profiles[16, 4], profiles[32, 8])


def test_a_cold_plan_traces_two_batches_the_probe_and_the_answer():
    """The probe's trace alone guesses the answer (sizes the prime probe divides are per-row);
    lines through the two traces confirm it: no third trace, the same plan as exact lines give."""
    plan = plan_batch_size(
        TinyClassifier(), table_batch, 400_000, loss_fn=xent, device="cpu", max_batch=100_000
    )
    assert plan.fits and plan.traces == 2 and plan.cached_traces == 0
    assert _peak(TinyClassifier(), table_batch, plan.batch_size + 1) > plan.usable_bytes


def _peak(model, make_batch, n):
    est, _ = estimate_and_trace(model, make_batch(n), loss_fn=xent, device="cpu", iterations=2)
    return est.peak_allocated_bytes


def test_the_same_architecture_is_planned_again_from_the_cache():
    first = plan_batch_size(
        TinyClassifier(), table_batch, 400_000, loss_fn=xent, device="cpu", max_batch=100_000
    )
    again = plan_batch_size(
        TinyClassifier(), table_batch, 400_000, loss_fn=xent, device="cpu", max_batch=100_000
    )
    assert again.traces == 0 and again.cached_traces == first.traces
    assert (again.batch_size, again.estimated_bytes) == (first.batch_size, first.estimated_bytes)
    bigger = plan_batch_size(
        TinyClassifier(), table_batch, 800_000, loss_fn=xent, device="cpu", max_batch=100_000
    )
    assert bigger.traces == 1 and bigger.batch_size > first.batch_size  # only the new answer is traced


def test_the_cache_tells_frozen_layers_and_other_widths_apart():
    plan_batch_size(TinyClassifier(), table_batch, 400_000, loss_fn=xent, device="cpu", max_batch=100_000)
    frozen = TinyClassifier()
    frozen.net[0].requires_grad_(False)
    plan = plan_batch_size(frozen, table_batch, 400_000, loss_fn=xent, device="cpu", max_batch=100_000)
    assert plan.cached_traces == 0
    wider = plan_batch_size(
        TinyClassifier(hidden=96), table_batch, 400_000, loss_fn=xent, device="cpu", max_batch=100_000
    )
    assert wider.cached_traces == 0


class _NormedMLP(torch.nn.Module):
    """LayerNorm, GELU and cross-entropy: ops FakeTensorMode runs as Python decompositions."""

    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(32, 48), torch.nn.LayerNorm(48), torch.nn.GELU(), torch.nn.Linear(48, 4)
        )

    def forward(self, x, y=None):
        return self.net(x)


def test_meta_kernels_trace_what_python_decompositions_trace(monkeypatch):
    from torch._subclasses.fake_tensor import FakeTensorMode

    from workers.memory import estimator
    from workers.memory.trace import MetaKernelFakeMode

    decomposed = [torch.ops.aten.gelu_backward.default, torch.ops.aten.native_layer_norm_backward.default]
    assert all(MetaKernelFakeMode().cpp_meta_supports_symint(op) for op in decomposed)
    assert not any(FakeTensorMode().cpp_meta_supports_symint(op) for op in decomposed)
    events = {}
    for mode in (MetaKernelFakeMode, FakeTensorMode):
        monkeypatch.setattr(estimator, "MetaKernelFakeMode", mode)
        FakeTensorMode.cache_clear()  # the dispatch cache is shared: each mode computes its own
        est, trace = estimate_and_trace(
            _NormedMLP(), table_batch(24), loss_fn=xent, device="cpu", iterations=2
        )
        events[mode] = [(e.nbytes, e.op, e.phase, e.iteration) for e in trace.events]
    assert events[MetaKernelFakeMode] == events[FakeTensorMode]


def test_meta_kernels_size_batch_norm_statistics_as_the_cpu_kernel_allocates_them():
    """A bf16 input with fp32 weights (CPU autocast): the saved mean and invstd are fp32."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from workers.memory.trace import MetaKernelFakeMode

    args = (
        torch.randn(4, 64, 8, 8).bfloat16(),
        torch.ones(64),
        torch.zeros(64),
        torch.zeros(64),
        torch.ones(64),
    )
    real = torch.ops.aten.native_batch_norm.default(*args, True, 0.1, 1e-5)
    FakeTensorMode.cache_clear()
    with MetaKernelFakeMode() as mode:
        fake = torch.ops.aten.native_batch_norm.default(*(mode.from_tensor(a) for a in args), True, 0.1, 1e-5)
    nbytes = [t.untyped_storage().nbytes() for t in real]
    assert [t.untyped_storage().nbytes() for t in fake] == nbytes
    assert nbytes[1] == 64 * 4  # fp32, where FakeTensorMode's decomposition said bf16


def test_the_probe_is_a_prime_no_parameter_size_is_a_multiple_of():
    """34 input features: the first layer's 34 x 64 weights are a multiple of 17, so 19 rows probe."""
    from workers.memory.planner import _probe_batch

    model = TinyClassifier(features=34)
    assert _probe_batch(TinyClassifier()) == 17 and _probe_batch(model) == 19
    plan = plan_batch_size(
        model, lambda n: table_batch(n, 34), 400_000, loss_fn=xent, device="cpu", max_batch=100_000
    )
    assert plan.fits and plan.traces == 2


class _Autoencoder(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 4, 2, 1), torch.nn.ConvTranspose2d(8, 3, 4, 2, 1)
        )

    def forward(self, x, y=None):
        return self.net(x)


def test_the_one_trace_guess_takes_convolution_scratch_per_row():
    """Above its calibration batch the estimator scales a convolution's measured scratch with the
    rows, so the guess does too, whether or not the probe divides its size; other sizes it does
    not divide stay fixed."""
    from workers.memory.extrapolation import divisible_line

    net = _Autoencoder()
    x = torch.rand(17, 3, 16, 16)
    _, trace = estimate_and_trace(
        net, (x, x), loss_fn=lambda o, b: (o - b[1]).pow(2).mean(), device="cpu", iterations=2
    )
    p = profile_of(trace, 17, (x, x), keep_trace=False)
    scratch = p.scaled_scratch[p.alloc_of] & (p.sizes > 0)
    assert scratch.any()
    line = divisible_line(p)
    assert torch.equal(line.sizes(34)[scratch], 2 * p.sizes[scratch])
    fixed = ~scratch & (p.sizes > 0) & (torch.remainder(p.sizes, 17) != 0)
    assert torch.equal(line.sizes(34)[fixed], p.sizes[fixed])
