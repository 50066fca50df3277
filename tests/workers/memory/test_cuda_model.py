"""How the CPU build of torch models a CUDA run."""

import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode

from workers.memory import estimate_training_memory
from workers.memory.cuda_model import (
    CudaTarget,
    _cuda_autocast_policy,
    _cuda_dropout,
    move_to_fake_cuda,
)
from workers.memory.trace import fake_batch, fake_model


def _loss(out, batch):
    return out.float().pow(2).mean()


def test_emulated_cuda_autocast_runs_norms_and_softmax_in_fp32():
    x = torch.randn(4, 8)
    with _cuda_autocast_policy(), torch.autocast("cpu", dtype=torch.bfloat16):
        h = torch.nn.functional.linear(x, torch.randn(8, 8))
        assert h.dtype == torch.bfloat16  # matmuls stay in low precision, as on CUDA
        assert F.layer_norm(h, (8,)).dtype == torch.float32
        assert F.softmax(h, dim=-1).dtype == torch.float32
        assert F.log_softmax(h, dim=-1).dtype == torch.float32


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


def test_cublas_workspace_follows_the_compute_capability():
    assert CudaTarget(compute_capability=(9, 0)).cublas_workspace_bytes == 32 * 1024 * 1024
    assert CudaTarget(compute_capability=(8, 0)).cublas_workspace_bytes == 8 * 1024 * 1024 + 128 * 1024


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
