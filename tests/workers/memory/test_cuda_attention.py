"""CUDA's SDPA backend choice and allocations, modelled on the CPU build."""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from workers.memory import estimate_training_memory
from workers.memory.cuda_attention import select_backend
from workers.memory.cuda_model import CudaTarget


def _qkv(dtype=torch.float32, head=64, heads=4, length=128, kv_length=None, grad=True):
    shape = (2, heads, length, head)
    kv = (2, heads, kv_length or length, head)
    return (
        torch.empty(shape, dtype=dtype, requires_grad=grad),
        torch.empty(kv, dtype=dtype, requires_grad=grad),
        torch.empty(kv, dtype=dtype, requires_grad=grad),
    )


@pytest.mark.parametrize(
    ("dtype", "head", "mask", "dropout", "causal", "sm", "expected"),
    [
        (torch.bfloat16, 64, None, 0.1, False, (9, 0), "flash"),
        (torch.float16, 128, None, 0.0, True, (8, 0), "flash"),
        (torch.float32, 64, None, 0.1, False, (9, 0), "efficient"),  # flash needs 16-bit
        (torch.bfloat16, 64, "mask", 0.0, False, (9, 0), "efficient"),  # flash takes no mask
        (torch.float32, 72, None, 0.0, False, (8, 0), "efficient"),
        (torch.float32, 70, None, 0.0, False, (8, 0), "math"),  # not a multiple of 4
        (torch.bfloat16, 64, None, 0.0, False, (7, 5), "math"),  # no bf16 before sm80
        (torch.float16, 64, None, 0.0, False, (7, 5), "efficient"),
        (torch.bfloat16, 320, None, 0.0, False, (9, 0), "efficient"),  # flash: head dim <= 256
        (torch.bfloat16, 200, None, 0.0, False, (8, 6), "efficient"),  # sm86 training, head in (192, 224]
    ],
)
def test_sdpa_backend_follows_pytorchs_cuda_selection(dtype, head, mask, dropout, causal, sm, expected):
    q, k, v = _qkv(dtype, head)
    attn_mask = torch.zeros(2, 1, 128, 128, dtype=torch.bool) if mask else None
    assert select_backend(q, k, v, attn_mask, dropout, causal, sm) == expected


def test_causal_flash_needs_equal_query_and_key_lengths():
    q, k, v = _qkv(torch.bfloat16, length=64, kv_length=128)
    assert select_backend(q, k, v, None, 0.0, True, (9, 0)) == "efficient"


class _Attention(nn.Module):
    def __init__(self, dropout: float, dim: int = 128, heads: int = 4) -> None:
        super().__init__()
        self.heads, self.dropout = heads, dropout
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x):
        b, length, dim = x.shape
        q, k, v = self.qkv(x).view(b, length, 3, self.heads, dim // self.heads).unbind(2)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout)
        return self.out(y.transpose(1, 2).reshape(b, length, dim))


def _cuda_estimate(dropout: float, amp):
    torch.manual_seed(0)
    model = nn.Sequential(_Attention(dropout), _Attention(dropout))
    est = estimate_training_memory(
        model,
        torch.randn(4, 512, 128),
        loss_fn=lambda o, b: o.float().pow(2).mean(),
        amp=amp,
        cuda_target=CudaTarget(),
    )
    return est.peak_reserved_bytes


@pytest.mark.parametrize("amp", [None, "bf16"])
def test_attention_dropout_does_not_multiply_the_cuda_estimate(amp):
    # On CUDA, dropout stays inside the fused kernel (no B*H*L*L mask or probabilities).
    assert _cuda_estimate(0.1, amp) <= 1.02 * _cuda_estimate(0.0, amp)
