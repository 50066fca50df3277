"""Deep models for bench/deep_retrain.py and bench/memory_calibration.py (torch only, no project imports).

Imported by the benchmark and by its peer process in /work/venvs/conv-peers (Lightning, Accelerate),
so it depends on nothing but torch. ``step_peak`` is the measured peak of one real training step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F


class TextClassifier(nn.Module):
    """Token + position embeddings, a torch.nn TransformerEncoder, mean pooling, a linear head."""

    def __init__(self, vocab: int, dim: int, heads: int, layers: int, seq: int, classes: int = 4) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab, dim)
        self.positions = nn.Embedding(seq, dim)
        layer = nn.TransformerEncoderLayer(dim, heads, dim * 4, dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(dim, classes)

    def forward(self, x: torch.Tensor, y: Any = None) -> torch.Tensor:
        h = self.tokens(x) + self.positions(torch.arange(x.shape[1], device=x.device))
        return self.head(self.encoder(h).mean(dim=1))


class EmbeddingMLP(nn.Module):
    """An MLP on a sentence embedding concatenated with tabular features."""

    def __init__(self, dim: int = 384, tabular: int = 16, hidden: int = 512, classes: int = 3) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(dim + tabular, hidden),
            nn.LayerNorm(hidden),
            nn.GELU(),
            nn.Dropout(0.1),
            nn.Linear(hidden, hidden // 2),
            nn.GELU(),
            nn.Linear(hidden // 2, classes),
        )
        self.dim = dim

    def forward(self, x: torch.Tensor, y: Any = None) -> torch.Tensor:
        return self.net(x)


class ConvAutoencoder64(nn.Module):
    """The team's own model: Conv2d stride 2 down, ConvTranspose2d k4 s2 p1 back up, 64x64 images."""

    def __init__(self, base: int = 16) -> None:
        super().__init__()
        self.enc = nn.Sequential(
            nn.Conv2d(3, base, 4, 2, 1), nn.ReLU(), nn.Conv2d(base, base * 2, 4, 2, 1), nn.ReLU()
        )
        self.dec = nn.Sequential(
            nn.ConvTranspose2d(base * 2, base, 4, 2, 1),
            nn.ReLU(),
            nn.ConvTranspose2d(base, 3, 4, 2, 1),
            nn.Sigmoid(),
        )

    def forward(self, x: torch.Tensor, y: Any = None) -> torch.Tensor:
        return self.dec(self.enc(x))


@dataclass(frozen=True)
class DeepCase:
    name: str
    build: Callable[[], nn.Module]
    make_batch: Callable[[int], Any]  # n -> (inputs, targets)
    loss_fn: Callable[[Any, Any], torch.Tensor]  # (model output, batch) -> loss
    optimizer: str  # "adam" / "sgd" (momentum 0.9), as workers.memory's shorthand
    epoch_rows: int = 50_000  # the training set an epoch runs over (bench/deep_retrain.py)
    # How a job plans it, when not plan_batch_size on build() and make_batch: cap -> (batch, traces, margin)
    plan: Callable[[int], tuple[int, int, float]] | None = None


def _tokens(vocab: int, seq: int) -> Callable[[int], Any]:
    def make(n: int) -> Any:
        g = torch.Generator().manual_seed(n)
        return torch.randint(0, vocab, (n, seq), generator=g), torch.randint(0, 4, (n,), generator=g)

    return make


def _embedded(n: int) -> Any:
    g = torch.Generator().manual_seed(n)
    return torch.randn(n, 400, generator=g), torch.randint(0, 3, (n,), generator=g)


def _images(n: int) -> Any:
    g = torch.Generator().manual_seed(n)
    x = torch.rand(n, 3, 64, 64, generator=g)
    return x, x


def _xent(out: torch.Tensor, batch: Any) -> torch.Tensor:
    return F.cross_entropy(out, batch[1])


def _mse(out: torch.Tensor, batch: Any) -> torch.Tensor:
    return F.mse_loss(out, batch[1])


def cases(scale: float = 1.0) -> list[DeepCase]:
    """The four deep recipes; ``scale`` < 1 shrinks widths for the small caps (fewer FLOPs per row)."""
    d = max(32, int(64 * scale) // 8 * 8)
    return [
        DeepCase("text-small", lambda: TextClassifier(2000, d, 4, 2, 64), _tokens(2000, 64), _xent, "adam"),
        DeepCase(
            "text-base", lambda: TextClassifier(4000, 2 * d, 4, 3, 128), _tokens(4000, 128), _xent, "adam"
        ),
        # An embedding service retrains on a window of its logged, labelled requests: 1,000,000 rows,
        # not 50,000 (at the planned batch of 5,000-20,000 rows that was 3-11 optimizer steps).
        DeepCase("embedding-mlp", lambda: EmbeddingMLP(), _embedded, _xent, "adam", 1_000_000),
        DeepCase("conv-autoencoder", lambda: ConvAutoencoder64(), _images, _mse, "sgd"),
    ]


TEAM_MODULE = "bench.team_models"


def _team_texts(n: int, seed: int = 0) -> tuple[Any, list[str]]:
    """Texts of 8 to 200 words (a tokenizer keeps 128 tokens) from a 3,000-word vocabulary, and
    labels: "yes" when a marker word is in the text."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(seed)
    vocabulary = np.array([f"w{i}" for i in range(3000)])
    texts, labels = [], []
    for _ in range(n):
        words = list(rng.choice(vocabulary, int(rng.integers(8, 200))))
        texts.append(" ".join(words))
        labels.append("yes" if "w7" in words else "no")
    return pd.DataFrame({"review": texts}), labels


def team_recipe_case(rows: int = 5_000) -> DeepCase:
    """The team's own convolutional model through the custom-recipe path, as a retraining job runs
    it: a recipe naming ``bench.team_models:cnn_text_factory`` (allowed as an operator would list
    it), ``engine.prepare`` (tokenizer fitted on the texts, the factory's module) and
    ``engine.plan_training`` (the planner on the job's own batches: the longest texts); the true
    maximum is bisected on the same supervised module and batches. Imports the project's training
    engine (pandas and all): not for the peers' venv."""
    import copy

    from workers.training import engine
    from workers.training.recipes import allow_recipe_modules, recipe_from_dict

    allow_recipe_modules({TEAM_MODULE})
    recipe = recipe_from_dict(
        {
            "name": "team-cnn",
            "factory": f"{TEAM_MODULE}:cnn_text_factory",
            "hyperparameters": {"width": 128, "kernel": 5, "vocab_size": 3000},
            "optimizer": "adam",
            "max_batch_size": 65536,
        },
        task="classification",
    )
    frame, labels = _team_texts(rows)
    schema = engine.make_schema("classification", {"review": "text"}, ["no", "yes"])
    prepared = engine.prepare(recipe, schema, frame, labels)

    def build() -> nn.Module:
        return engine.supervised(copy.deepcopy(prepared.module), recipe.loss)

    def make_batch(n: int) -> Any:
        return prepared.data.batch(prepared.data.planning_index(n))

    def plan(cap: int) -> tuple[int, int, float]:
        p = engine.plan_training(recipe, prepared, budget_bytes=cap, device="cpu")
        return p.batch_size, p.traces, p.margin

    return DeepCase("team-cnn (recipe)", build, make_batch, lambda loss, batch: loss, "adam", plan=plan)


def build_optimizer(model: nn.Module, name: str) -> torch.optim.Optimizer:
    if name == "sgd":
        return torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    return torch.optim.Adam(model.parameters(), lr=1e-3)


def live_bytes(*objects: Any) -> int:
    """Bytes of the distinct storages behind the tensors of modules, optimizers and batches."""
    tensors: list[torch.Tensor] = []
    for obj in objects:
        if isinstance(obj, nn.Module):
            tensors += [*obj.parameters(), *obj.buffers()]
        elif isinstance(obj, torch.optim.Optimizer):
            tensors += [
                v for state in obj.state.values() for v in state.values() if isinstance(v, torch.Tensor)
            ]
        elif isinstance(obj, tuple | list):
            tensors += [t for t in obj if isinstance(t, torch.Tensor)]
    storages = {id(t.untyped_storage()): t.untyped_storage().nbytes() for t in tensors}
    return sum(storages.values())


def profiled_peak(call: Callable[[], Any]) -> int:
    """Highest running sum of the allocations torch.profiler records during ``call``."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        call()
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    running = peak = 0
    for event in sorted(events, key=lambda e: e.start_ns()):
        running += event.nbytes()
        peak = max(peak, running)
    return peak


def train_step(
    model: nn.Module, opt: torch.optim.Optimizer, batch: Any, loss_fn: Callable[..., Any]
) -> float:
    opt.zero_grad(set_to_none=True)
    loss = loss_fn(model(*batch), batch)  # model(x, y) ignores y, as workers.memory.loop calls it
    loss.backward()
    opt.step()
    return float(loss.detach())


def step_peak(case: DeepCase, n: int, steps: int = 2) -> int:
    """Measured peak bytes of ``steps`` real training steps at batch ``n`` of a fresh model
    (what was live before, plus the profiler's running peak): what a device cap is compared with."""
    torch.manual_seed(0)
    model = case.build()
    opt = build_optimizer(model, case.optimizer)
    batch = case.make_batch(n)
    before = live_bytes(model, batch)

    def run() -> None:
        for _ in range(steps):
            train_step(model, opt, batch, case.loss_fn)

    return before + profiled_peak(run)


def probe_peak(case: DeepCase, n: int) -> int:
    """Measured peak of one training step at batch ``n`` with the optimizer state already there
    (a warm-up step on 2 rows allocates it), the steady state of training: live bytes (weights,
    optimizer state, batch) plus the profiler's running peak of the step."""
    torch.manual_seed(0)
    model = case.build()
    opt = build_optimizer(model, case.optimizer)
    train_step(model, opt, case.make_batch(2), case.loss_fn)
    opt.zero_grad(set_to_none=True)
    batch = case.make_batch(n)
    return live_bytes(model, opt, batch) + profiled_peak(lambda: train_step(model, opt, batch, case.loss_fn))


class SimulatedOOM(RuntimeError):
    """Raised by a simulated device: the message is the one Lightning and Accelerate recognise."""

    def __init__(self, n: int, cap: int) -> None:
        super().__init__(
            f"DefaultCPUAllocator: can't allocate memory: batch {n} over the simulated {cap} byte cap"
        )


@dataclass
class CapOracle:
    """A device of ``cap`` bytes for one model. Bisection measured that ``fits`` rows fit and
    ``fails`` rows do not (the peak grows with the batch), so only batches between them are
    measured again; a batch at or above ``fails`` is refused without allocating it (it would take
    more memory than this machine has), and is then an OOM costing no time."""

    case: DeepCase
    cap: int
    fits: int
    fails: int

    def check(self, n: int) -> None:
        if n >= self.fails or (n > self.fits and probe_peak(self.case, n) > self.cap):
            raise SimulatedOOM(n, self.cap)
