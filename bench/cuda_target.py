"""CUDA-target estimates without a GPU: the zoo's transformers and a toy attention model (issue 14).

Prints, per model and precision, the estimated peak allocated and peak reserved bytes for a CUDA
GPU (``CudaTarget``, sm90 by default) as the CPU build of torch predicts them. Nothing here is a
measurement: it shows how the CUDA modelling moves the estimates (run it from an older checkout,
``--root``, for a before/after). The toy model (2 pre-norm encoder layers, B=8, H=8, L=1024,
d=512, F.scaled_dot_product_attention) is the case where attention dropout used to be traced on
the CPU's math kernel.

    python bench/cuda_target.py [--root PATH] [--models a,b] [--sm 9.0]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--root", default=str(HERE), help="checkout whose workers.memory is used")
    parser.add_argument("--models", default="", help="comma-separated: zoo transformer names and/or toy")
    parser.add_argument("--sm", default="9.0", help="compute capability of the target")
    args = parser.parse_args()
    sys.path.insert(0, str(HERE))
    sys.path.insert(0, str(Path(args.root).resolve()))
    import torch

    from bench._memory_zoo_models import ZOO
    from workers.memory import estimate_training_memory
    from workers.memory.cuda_model import CudaTarget

    torch.set_num_threads(1)
    major, minor = (int(x) for x in args.sm.split("."))
    target = CudaTarget(compute_capability=(major, minor))
    transformers = (
        "bert_encoder",
        "distilbert",
        "gpt2_decoder",
        "llama_decoder",
        "t5_enc_dec",
        "vit",
        "gpt2_124m",
    )
    wanted = set(args.models.split(",")) if args.models else {*transformers, "toy"}
    rows: list[tuple[str, int, str, int, int, float]] = []
    mib = 1024 * 1024
    print(f"workers.memory from {Path(args.root).resolve()}; target sm{major}{minor}; adam")
    print(f"{'model':<24} {'bs':>3} {'amp':<5} {'allocated':>10} {'reserved':>10} {'est.s':>6}   (MiB)")
    cases: list[tuple[str, object, object, object, int]] = []
    for entry in ZOO:
        if entry.name in transformers and entry.name in wanted:
            cases.append((entry.name, entry.build, entry.make_batch, entry.loss_fn, entry.batch_sizes[0]))
    if "toy" in wanted:
        for dropout in (0.0, 0.1):
            cases.append((f"toy_attention p={dropout}", _toy(dropout), _toy_batch, _toy_loss, 8))
    for name, build, make_batch, loss_fn, bs in cases:
        for amp in (None, "bf16"):
            torch.manual_seed(0)
            est = estimate_training_memory(
                build(),  # type: ignore[operator]
                make_batch(bs),  # type: ignore[operator]
                loss_fn=loss_fn,  # type: ignore[arg-type]
                optimizer="adam",
                amp=amp,
                device="cuda",
                cuda_target=target,
            )
            row = (
                name,
                bs,
                amp or "fp32",
                est.peak_allocated_bytes,
                est.peak_reserved_bytes,
                est.estimate_seconds,
            )
            rows.append(row)
            print(
                f"{name:<24} {bs:>3} {row[2]:<5} {row[3] / mib:10.1f} {row[4] / mib:10.1f} {row[5]:6.2f}",
                flush=True,
            )


def _toy(dropout: float):  # type: ignore[no-untyped-def]
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class Block(nn.Module):
        def __init__(self, dim: int = 512, heads: int = 8) -> None:
            super().__init__()
            self.heads = heads
            self.norm1 = nn.LayerNorm(dim)
            self.qkv = nn.Linear(dim, 3 * dim)
            self.proj = nn.Linear(dim, dim)
            self.norm2 = nn.LayerNorm(dim)
            self.ff = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
            self.dropout = dropout

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, length, dim = x.shape
            q, k, v = self.qkv(self.norm1(x)).view(b, length, 3, self.heads, dim // self.heads).unbind(2)
            q, k, v = (t.transpose(1, 2) for t in (q, k, v))
            attn = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if self.training else 0.0)
            x = x + self.proj(attn.transpose(1, 2).reshape(b, length, dim))
            return x + self.ff(self.norm2(x))

    def build() -> nn.Module:
        return nn.Sequential(Block(), Block())

    return build


def _toy_batch(bs: int):  # type: ignore[no-untyped-def]
    import torch

    return torch.randn(bs, 1024, 512)


def _toy_loss(out, batch):  # type: ignore[no-untyped-def]
    return out.float().pow(2).mean()


if __name__ == "__main__":
    main()
