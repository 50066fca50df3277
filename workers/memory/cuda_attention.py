"""Scaled dot-product attention as CUDA runs it, for a trace of fake CPU tensors.

The CPU build's SDPA falls back to its math kernel whenever ``dropout_p > 0`` (several B*H*L*L
tensors per call), while CUDA picks a fused kernel that keeps no attention matrix at all. So on a
CUDA target the trace replaces ``F.scaled_dot_product_attention`` by a stand-in that

1. picks the backend as ``select_sdp_backend`` in PyTorch's ``transformers/cuda/sdp_utils.cpp``
   does, in its default order flash -> memory-efficient -> math (cuDNN attention comes first only
   on sm90/sm100 with cuDNN > 9.15, ``CudaTarget.prefer_cudnn_attention``):

   - flash: no attn_mask; fp16/bf16 (sm80+); q, k, v head dims equal and <= 256; sm80-sm121;
     is_causal only with equal query/key lengths; training with a head dim in (192, 224], or
     above 224 with dropout, is refused on sm86-89 and sm120-121;
   - memory-efficient: sm50-sm121; fp16/fp32 (and bf16 on sm80+); q/k head dims equal and q, v
     head dims multiples of the GEMM alignment (8 for 16-bit and 4 for fp32 on sm80+, 8/1 before);
   - math otherwise: PyTorch's composite (``_scaled_dot_product_attention_math``), traced as is;

2. allocates what that kernel allocates (flash-attention 2's ``mha_fwd``/``mha_bwd`` and the
   CUTLASS memory-efficient kernels as called from ``attention.cu``/``attention_backward.cu``):
   the output, fp32 log-sum-exp (rounded up to 32 rows for memory-efficient), the philox
   seed/offset, and in backward the three gradients, fp32 ``softmax_d``/``delta`` and flash's
   fp32 ``dq_accum`` (sequence rounded to 128, head dim to 32); a 16-bit memory-efficient
   backward gets an fp32 grad-query accumulator. Dropout never materialises a mask.

Under (emulated) autocast SDPA is a lower-precision op: q, k and v are cast first.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F

_HALF = (torch.float16, torch.bfloat16)


def select_backend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    attn_mask: Any,
    dropout_p: float,
    is_causal: bool,
    compute_capability: tuple[int, int],
    *,
    prefer_cudnn: bool = False,
) -> str:
    """ "cudnn", "flash", "efficient" or "math", as sdp_utils.cpp decides for dense inputs."""
    sm = compute_capability[0] * 10 + compute_capability[1]
    training = q.requires_grad or k.requires_grad or v.requires_grad
    if prefer_cudnn and _cudnn_ok(q, k, v, dropout_p, sm):
        return "cudnn"
    if _flash_ok(q, k, v, attn_mask, dropout_p, is_causal, sm, training):
        return "flash"
    if _efficient_ok(q, k, v, sm):
        return "efficient"
    return "math"


def _flash_ok(
    q: Any, k: Any, v: Any, mask: Any, dropout_p: float, causal: bool, sm: int, training: bool
) -> bool:
    head = q.shape[-1]
    if mask is not None or not 80 <= sm <= 121 or q.dtype not in _HALF:
        return False
    if not (head == k.shape[-1] == v.shape[-1] and head <= 256):
        return False
    if causal and q.shape[-2] != k.shape[-2]:
        return False
    if training and (86 <= sm <= 89 or 120 <= sm <= 121):
        if 192 < head <= 224 or (head > 224 and dropout_p > 0):
            return False
    return q.stride(-1) == 1 and k.stride(-1) == 1 and v.stride(-1) == 1


def _efficient_ok(q: Any, k: Any, v: Any, sm: int) -> bool:
    if not 50 <= sm <= 121:
        return False
    allowed = (torch.float16, torch.float32, torch.bfloat16) if sm >= 80 else (torch.float16, torch.float32)
    if q.dtype not in allowed:
        return False
    half = q.dtype in _HALF
    if sm >= 80:
        alignment = 8 if half else 4
    else:
        alignment = 8 if (half and sm >= 70) else 1
    head, head_v = q.shape[-1], v.shape[-1]
    return head == k.shape[-1] and head % alignment == 0 and head_v % alignment == 0 and head > 0


def _cudnn_ok(q: Any, k: Any, v: Any, dropout_p: float, sm: int) -> bool:
    return (
        80 <= sm <= 121
        and q.dtype in _HALF
        and q.shape[-1] <= 128
        and q.shape[-1] % 8 == 0
        and v.shape[-1] % 8 == 0
        and dropout_p * 16 == math.floor(dropout_p * 16)
    )


def _round(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


class _FusedAttention(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any, backend: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: Any
    ) -> torch.Tensor:  # type: ignore[override]
        batch, heads, length, _ = q.shape
        value_dim = v.shape[-1]
        out = torch.empty(batch, length, heads, value_dim, dtype=q.dtype, device=q.device).transpose(1, 2)
        rows = length if backend in ("flash", "cudnn") else _round(length, 32)
        lse = torch.empty(batch, heads, rows, dtype=torch.float32, device=q.device)
        rng = torch.empty(2, dtype=torch.int64, device=q.device)  # philox seed and offset
        ctx.backend = backend
        ctx.save_for_backward(q, k, v, out, lse, rng)
        ctx.mask = mask
        return out

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[Any, ...]:  # type: ignore[override]
        q, k, v, out, lse, rng = ctx.saved_tensors
        batch, heads, length, head = q.shape
        scratch = [torch.empty(batch, heads, _round(length, 128), dtype=torch.float32, device=q.device)]
        if ctx.backend == "flash":
            scratch.append(
                torch.empty(
                    batch, _round(length, 128), heads, _round(head, 32), dtype=torch.float32, device=q.device
                )
            )
        elif ctx.backend == "efficient" and q.dtype in _HALF:
            scratch.append(torch.empty(batch, length, heads, head, dtype=torch.float32, device=q.device))
        grads = tuple(
            torch.empty(
                t.shape[0], t.shape[2], t.shape[1], t.shape[3], dtype=t.dtype, device=t.device
            ).transpose(1, 2)
            for t in (q, k, v)
        )
        del scratch
        return (None, *grads, None)


_AUTOCAST_DTYPE: list[torch.dtype] = []  # set while the emulated CUDA autocast is on


@contextlib.contextmanager
def emulated_autocast(dtype: torch.dtype) -> Iterator[None]:
    _AUTOCAST_DTYPE.append(dtype)
    try:
        yield
    finally:
        _AUTOCAST_DTYPE.pop()


@contextlib.contextmanager
def cuda_sdpa(compute_capability: tuple[int, int], prefer_cudnn: bool = False) -> Iterator[None]:
    """Route ``F.scaled_dot_product_attention`` to the CUDA backend's allocations while tracing.

    Patched on the module, as dropout is (see cuda_model._cuda_dropout), process-wide while the
    trace runs on fake tensors.
    """
    original = F.scaled_dot_product_attention

    def sdpa(
        query: Any,
        key: Any,
        value: Any,
        attn_mask: Any = None,
        dropout_p: float = 0.0,
        is_causal: bool = False,
        scale: Any = None,
        enable_gqa: bool = False,
    ) -> Any:
        if _AUTOCAST_DTYPE and query.is_floating_point() and query.dtype == torch.float32:
            low = _AUTOCAST_DTYPE[-1]
            query, key, value = query.to(low), key.to(low), value.to(low)
            if isinstance(attn_mask, torch.Tensor) and attn_mask.is_floating_point():
                attn_mask = attn_mask.to(low)
        if query.dim() != 4:
            return original(
                query, key, value, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa
            )
        backend = select_backend(
            query, key, value, attn_mask, dropout_p, is_causal, compute_capability, prefer_cudnn=prefer_cudnn
        )
        if backend == "math":
            return torch.ops.aten._scaled_dot_product_attention_math(
                query, key, value, attn_mask, dropout_p, is_causal, None, scale=scale, enable_gqa=enable_gqa
            )[0]
        return _FusedAttention.apply(backend, query, key, value, attn_mask)

    F.scaled_dot_product_attention = sdpa  # type: ignore[assignment]
    try:
        yield
    finally:
        F.scaled_dot_product_attention = original
