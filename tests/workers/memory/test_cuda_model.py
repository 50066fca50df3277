"""How the CPU build of torch models a CUDA run."""

import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode

from workers.memory import estimate_training_memory
from workers.memory.cuda_model import (
    CudaTarget,
    _cuda_dropout,
    autocast_emulation,
    cuda_autocast_ops,
    move_to_fake_cuda,
)
from workers.memory.estimator import _trace
from workers.memory.trace import fake_batch, fake_model


def _loss(out, batch):
    return out.float().pow(2).mean()


def test_emulated_cuda_autocast_follows_the_installed_torchs_cuda_policy():
    x = torch.randn(4, 8)
    with autocast_emulation("bf16"):
        h = torch.nn.functional.linear(x, torch.randn(8, 8))
        assert h.dtype == torch.bfloat16  # matmuls in low precision
        assert F.layer_norm(h, (8,)).dtype == torch.float32
        assert F.rms_norm(h, (8,)).dtype == torch.float32
        assert F.softmax(h, dim=-1).dtype == torch.float32
        assert h.softmax(-1).dtype == torch.float32  # the Tensor method too
        assert torch.softmax(h, -1).dtype == torch.float32
        assert torch.pow(h, 3).dtype == torch.float32
        assert h.exp().dtype == torch.float32
        assert h.sum().dtype == torch.float32
        assert (h * h).dtype == torch.bfloat16  # not an autocast op: left alone


def test_cuda_autocast_op_list_comes_from_the_installed_torch():
    ops = cuda_autocast_ops()
    assert {"rms_norm", "pow", "exp", "log", "rsqrt", "softplus", "logsumexp", "cumsum", "prod"} <= ops
    assert {"linear", "matmul", "scaled_dot_product_attention", "upsample_nearest2d"} <= ops
    assert "relu" not in ops and "cat" not in ops


class _OpLog(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.ops.append((str(func), out))
        return out


def test_emulated_cuda_dropout_uses_the_fused_kernel_with_a_bool_mask():
    original = F.dropout
    with _cuda_dropout(), _OpLog() as log:
        F.dropout(torch.randn(4, 4), 0.5, True)
    masks = [out[1] for op, out in log.ops if op == "aten.native_dropout.default"]
    assert masks and masks[0].dtype == torch.bool
    assert F.dropout is original


def test_optimizer_step_counters_are_not_device_memory():
    model = torch.nn.Linear(64, 64)
    batch = torch.randn(8, 64)
    est = estimate_training_memory(model, batch, loss_fn=_loss, optimizer="adam", device="cuda", iterations=2)
    # weight and bias: 2 blocks of state each, never 512-byte step counters on the GPU
    assert est.breakdown["optimizer_state"] == 2 * (16384 + 512)


def test_fake_cuda_copy_keeps_tied_parameters_tied():
    model = torch.nn.Sequential(torch.nn.Embedding(10, 8), torch.nn.Linear(8, 10, bias=False))
    model[1].weight = model[0].weight
    mode = FakeTensorMode()
    fmodel, fbatch = move_to_fake_cuda(
        fake_model(model, mode), fake_batch(torch.zeros(2, dtype=torch.long), mode), mode
    )
    assert fmodel[0].weight is fmodel[1].weight
    assert fmodel[0].weight.device.type == "cuda"
    assert fbatch.device.type == "cuda"


class _NewGELUMLP(torch.nn.Module):
    """GPT-2's GELU: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), with torch.pow."""

    def __init__(self) -> None:
        super().__init__()
        self.up = torch.nn.Linear(64, 256)
        self.down = torch.nn.Linear(256, 64)

    def forward(self, x):
        h = self.up(x)
        h = 0.5 * h * (1.0 + torch.tanh(0.7978845608 * (h + 0.044715 * torch.pow(h, 3.0))))
        return self.down(h)


class _RMSNormNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(64, 256)
        self.norm = torch.nn.RMSNorm(256)
        self.head = torch.nn.Linear(256, 8)

    def forward(self, x):
        return self.head(self.norm(self.lin(x)))


def _forward_allocations(model, batch, op):
    trace, _ = _trace(model, batch, _loss, "sgd", "bf16", 2, 1, False, CudaTarget(), False)
    return [e.nbytes for e in trace.events if e.op == op and e.phase == "forward" and e.nbytes > 0]


def test_cuda_target_runs_pow_in_fp32_under_bf16_autocast():
    x = torch.randn(32, 64)
    pow_outputs = _forward_allocations(_NewGELUMLP(), x, "aten.pow.Tensor_Scalar")
    assert 32 * 256 * 4 in pow_outputs  # fp32, as CUDA autocast runs pow
    assert 32 * 256 * 2 not in pow_outputs  # never the bf16 size (the loss's pow is 32 x 64 fp32)


def test_cuda_target_runs_rms_norm_in_fp32_under_bf16_autocast():
    x = torch.randn(32, 64)
    casts = _forward_allocations(_RMSNormNet(), x, "aten._to_copy.default")
    assert 32 * 256 * 4 in casts  # the bf16 activation cast up for the fp32 norm
    fp32_rsqrt = _forward_allocations(_RMSNormNet(), x, "aten.rsqrt.default")
    assert fp32_rsqrt and all(n == 32 * 4 for n in fp32_rsqrt)


def test_capacity_is_the_device_total_minus_the_cuda_context():
    import pytest

    from workers.memory.allocator import SimulatedOutOfMemory

    model, batch = torch.nn.Linear(256, 256), torch.randn(64, 256)
    target = CudaTarget(context_bytes=512 * 1024 * 1024)
    free_run = estimate_training_memory(model, batch, loss_fn=_loss, cuda_target=target)
    roomy = free_run.peak_reserved_bytes + target.context_bytes
    estimate_training_memory(model, batch, loss_fn=_loss, cuda_target=target, capacity_bytes=roomy)
    with pytest.raises(SimulatedOutOfMemory):
        # Enough for the job's reserved bytes, not once the context has its share.
        estimate_training_memory(
            model,
            batch,
            loss_fn=_loss,
            cuda_target=target,
            capacity_bytes=free_run.peak_reserved_bytes + 2 * 1024**2,
        )


class _Blocks(torch.nn.Module):
    """Two blocks after a stem, checkpointed by torch.utils.checkpoint (reentrant or not)."""

    def __init__(self, reentrant):
        super().__init__()
        self.reentrant = reentrant
        self.stem = torch.nn.Linear(256, 256)
        self.blocks = torch.nn.ModuleList(
            torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 256))
            for _ in range(2)
        )
        self.head = torch.nn.Linear(256, 10)

    def forward(self, x):
        h = self.stem(x)
        for block in self.blocks:
            h = torch.utils.checkpoint.checkpoint(block, h, use_reentrant=self.reentrant)
        return self.head(h)


def _backward_matmul_outputs(model, amp):
    batch = torch.randn(64, 256)
    target = CudaTarget(workspace_env=())
    trace, _ = _trace(model, batch, _loss, "sgd", amp, 2, 1, False, target, False)
    return {e.nbytes for e in trace.events if e.phase == "backward" and e.op == "aten.addmm.default"}


def test_checkpoint_recomputation_runs_under_the_forwards_cuda_autocast():
    fp32 = {64 * 1024 * 4, 64 * 256 * 4}
    for reentrant in (False, True):
        # the recomputed Linear outputs: 64 x 1024 (and 64 x 256 when reentrant) at 2 bytes
        recomputed = _backward_matmul_outputs(_Blocks(reentrant), "bf16")
        assert 64 * 1024 * 2 in recomputed and not recomputed & fp32
        assert 64 * 1024 * 4 in _backward_matmul_outputs(_Blocks(reentrant), None)


def test_checkpointed_training_under_bf16_estimates_for_a_cuda_target():
    model = torch.nn.Sequential(
        *[torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.GELU()) for _ in range(3)]
    )
    est = estimate_training_memory(
        model,
        torch.randn(32, 64),
        loss_fn=_loss,
        optimizer="sgd",
        device="cuda",
        amp="bf16",
        checkpointing=True,
    )
    assert est.checkpointing and est.peak_allocated_bytes > 0
