"""Real tiny training jobs for the placement tests: estimated, then trained on the CPU under the
simulated device's allocator-replay guard with the reservation the placer gave them."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import torch
import torch.nn as nn
import torch.nn.functional as F

from workers.memory import estimate_training_memory
from workers.memory.loop import build_optimizer, run_training
from workers.placement import reservation_bytes
from workers.placement.isolation import SimulatedDeviceGuard, allocator_budget


class Mlp(nn.Module):
    def __init__(self, features: int, hidden: int, classes: int = 4) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(features, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, classes),
        )

    def forward(self, x: torch.Tensor, y: torch.Tensor | None = None) -> torch.Tensor:
        return self.net(x)


def xent(out: torch.Tensor, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    return F.cross_entropy(out, batch[1])


@dataclass(frozen=True)
class TinyJob:
    """One retraining job: a model shape, a batch size and an optimizer."""

    hidden: int
    batch: int
    optimizer: str = "adam"
    features: int = 64

    def build(self) -> tuple[Mlp, tuple[torch.Tensor, torch.Tensor]]:
        torch.manual_seed(self.hidden + self.batch)
        model = Mlp(self.features, self.hidden)
        batch = (torch.randn(self.batch, self.features), torch.randint(0, 4, (self.batch,)))
        return model, batch

    def reservation(self, *, underestimate: float = 1.0) -> int:
        """Estimate + margin + CUDA context; ``underestimate`` < 1 shrinks the estimate on purpose."""
        return reservation_bytes(int(_estimated_bytes(self) * underestimate))

    def run(self, reservation: int) -> int:
        """Train 2 steps (Adam's state exists from the first) on the CPU, capped at ``reservation``; the measured bytes (replay + context)."""
        model, batch = self.build()
        guard = SimulatedDeviceGuard(allocator_budget(reservation))
        guard.register_module(model)
        guard.register(batch)
        opt = build_optimizer(list(model.parameters()), self.optimizer)
        with guard:
            run_training(model, batch, opt, loss_fn=xent, iterations=2)
        return guard.measured_bytes


@cache
def _estimated_bytes(job: TinyJob) -> int:
    model, batch = job.build()
    est = estimate_training_memory(model, batch, loss_fn=xent, optimizer=job.optimizer, device="cuda")
    return est.peak_reserved_bytes
