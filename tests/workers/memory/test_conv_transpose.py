"""Transposed convolutions on CPU, held out: estimate >= the profiler-measured peak, and close to it.

The shapes below were not used to build anything in the estimator (it measures each transposed
kernel's allocations on zeros of the traced shapes); they span kernels, strides, paddings,
dilations, output paddings, groups, channel counts off the SIMD block, batch 1 (ATen's native
im2col path) and 1 and 2 threads (oneDNN's per-thread scratchpads).
"""

from collections.abc import Iterator

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from tests.workers.memory.conftest import measured_cpu_peak
from workers.memory import cpu_kernels, estimate_training_memory

TIGHT = 0.005  # relative over-estimate allowed


@pytest.fixture(params=[1, 2], ids=["1thread", "2threads"])
def threads(request: pytest.FixtureRequest) -> Iterator[int]:
    before = torch.get_num_threads()
    torch.set_num_threads(request.param)
    yield request.param
    torch.set_num_threads(before)


class _Up(nn.Module):
    """A strided Conv2d down, then one ConvTranspose2d of the given configuration."""

    def __init__(self, cin: int, cout: int, kernel: int, stride: int, padding: int, **kw: int) -> None:
        super().__init__()
        self.down = nn.Conv2d(3, cin, 4, 2, 1)
        self.up = nn.ConvTranspose2d(cin, cout, kernel, stride, padding, **kw)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.up(F.relu(self.down(x))))


def _loss(out: torch.Tensor, batch: torch.Tensor) -> torch.Tensor:
    return out.pow(2).mean()


def _estimate_and_measure(factory, batch: torch.Tensor, loss_fn=_loss) -> tuple[int, int]:  # type: ignore[no-untyped-def]
    torch.manual_seed(0)
    est = estimate_training_memory(factory(), batch, loss_fn=loss_fn, optimizer="sgd", device="cpu")
    torch.manual_seed(0)
    return est.peak_allocated_bytes, measured_cpu_peak(factory(), batch, loss_fn, "sgd")


# (cin, cout, kernel, stride, padding, extra, batch, image side)
GRID = [
    (16, 3, 4, 2, 1, {}, 4, 32),
    (32, 16, 4, 2, 1, {}, 2, 32),
    (12, 5, 3, 2, 1, {"output_padding": 1}, 3, 16),
    (16, 8, 5, 3, 2, {}, 2, 16),
    (8, 8, 3, 1, 1, {}, 4, 16),
    (16, 16, 2, 2, 0, {}, 2, 16),
    (24, 12, 3, 2, 0, {"dilation": 2}, 2, 16),
    (32, 32, 4, 2, 1, {"groups": 4}, 2, 16),
    (16, 16, 3, 2, 1, {"groups": 16, "output_padding": 1}, 2, 16),
    (64, 4, 3, 2, 0, {}, 3, 16),
    (32, 16, 1, 1, 0, {}, 4, 16),
    (16, 8, 3, 1, 1, {}, 1, 16),  # batch 1, 3x3: ATen's slow_conv_transpose2d (im2col columns)
    (48, 64, 5, 2, 2, {}, 2, 16),
]


@pytest.mark.parametrize("config", GRID, ids=[f"c{c[0]}-{c[1]}k{c[2]}s{c[3]}p{c[4]}n{c[6]}" for c in GRID])
def test_transposed_convolution_is_never_under_and_tight(config, threads):  # type: ignore[no-untyped-def]
    cin, cout, kernel, stride, padding, extra, n, side = config
    est, measured = _estimate_and_measure(
        lambda: _Up(cin, cout, kernel, stride, padding, **extra), torch.rand(n, 3, side, side)
    )
    assert measured <= est <= measured * (1 + TIGHT)


def test_issue_autoencoder_64x64_sgd_momentum_single_thread():
    # The held-out model of issue 23 item 7: Conv2d stride 2 down, ConvTranspose2d k4 s2 p1 back up.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        factory = lambda: nn.Sequential(  # noqa: E731
            nn.Conv2d(3, 32, 4, 2, 1),
            nn.ReLU(),
            nn.Conv2d(32, 64, 4, 2, 1),
            nn.ReLU(),
            nn.ConvTranspose2d(64, 32, 4, 2, 1),
            nn.ReLU(),
            nn.ConvTranspose2d(32, 3, 4, 2, 1),
            nn.Sigmoid(),
        )
        est, measured = _estimate_and_measure(
            factory, torch.rand(4, 3, 64, 64), lambda o, b: F.mse_loss(o, b)
        )
    finally:
        torch.set_num_threads(before)
    assert measured <= est <= measured * (1 + TIGHT)


def test_batches_above_the_calibration_batch_are_scaled_up_never_under(monkeypatch, threads):
    # Calibrating at 16 images and scaling to 40 bounds the peak from above (no buffer shrinks
    # per image); the bound stays within a few percent of the whole step's peak.
    monkeypatch.setattr(cpu_kernels, "_CALIBRATION_FLOPS", 1)
    est, measured = _estimate_and_measure(lambda: _Up(16, 3, 4, 2, 1), torch.rand(40, 3, 16, 16))
    assert measured <= est <= measured * 1.05
