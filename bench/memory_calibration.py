"""Calibrate the planner's margin: the estimator's measured error per kind of layer (issue 23 item 7).

For small models of every kind of layer ``workers.memory.margins`` knows (linear, norm, embedding,
attention, conv, conv_transpose, recurrent), at two batch sizes, SGD (momentum) and Adam, 1 and 2
threads, it compares ``estimate_training_memory(...).peak_allocated_bytes`` with the measured peak
of 2 real training steps (live bytes before + torch.profiler's running peak), and writes each
kind's relative errors (every model's error counts for every kind it contains) to
``workers/memory/error_table.json``, the table the planner's default margin is read from. The
shapes here are not those of tests/workers/memory (those are held out). Rows for another device
already in the table are kept.

    nice -n 10 python bench/memory_calibration.py [--device cpu] [--dry-run]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

from bench._deep_models import (  # noqa: E402
    ConvAutoencoder64,
    DeepCase,
    EmbeddingMLP,
    TextClassifier,
    _embedded,
    _images,
    _mse,
    _tokens,
    _xent,
    step_peak,
)
from workers.memory import estimate_training_memory  # noqa: E402
from workers.memory.margins import TABLE_PATH, kind_margin, layer_kinds, margin_for_kinds, summarize  # noqa: E402


class _Head(nn.Module):
    def __init__(self, body: nn.Module) -> None:
        super().__init__()
        self.body = body

    def forward(self, x: torch.Tensor, y: object = None) -> torch.Tensor:
        return self.body(x)


class _Recurrent(nn.Module):
    def __init__(self, cell: type[nn.Module]) -> None:
        super().__init__()
        self.emb = nn.Embedding(500, 32)
        self.rnn = cell(32, 48, num_layers=1, batch_first=True)
        self.fc = nn.Linear(48, 4)

    def forward(self, x: torch.Tensor, y: object = None) -> torch.Tensor:
        return self.fc(self.rnn(self.emb(x))[0][:, -1])


class _Bag(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.bag = nn.EmbeddingBag(3000, 48, mode="mean")
        self.fc = nn.Linear(48, 4)

    def forward(self, x: torch.Tensor, y: object = None) -> torch.Tensor:
        return self.fc(self.bag(x))


def _rows(features: int, classes: int = 4):  # type: ignore[no-untyped-def]
    return lambda n: (torch.randn(n, features), torch.randint(0, classes, (n,)))


def _labelled_images(channels: int, side: int):  # type: ignore[no-untyped-def]
    return lambda n: (torch.randn(n, channels, side, side), torch.randint(0, 4, (n,)))


def _signals(n: int):  # type: ignore[no-untyped-def]
    x = torch.randn(n, 4, 256)
    return x, x


def _conv_net() -> nn.Module:
    return _Head(
        nn.Sequential(
            nn.Conv2d(3, 12, 3, padding=1), nn.BatchNorm2d(12), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(12, 24, 3, stride=2, padding=1, groups=3), nn.ReLU(),
            nn.Conv2d(24, 24, 3, padding=2, dilation=2), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(24, 4),
        )
    )  # fmt: skip


def _decoder_1d() -> nn.Module:
    return _Head(
        nn.Sequential(
            nn.Conv1d(4, 24, 5, 2, 2), nn.GELU(), nn.ConvTranspose1d(24, 12, 3, 1, 1), nn.GELU(),
            nn.ConvTranspose1d(12, 4, 4, 2, 1),
        )
    )  # fmt: skip


CASES = [
    DeepCase("mlp", lambda: _Head(nn.Sequential(nn.Linear(48, 192), nn.ReLU(), nn.Linear(192, 4))), _rows(48), _xent, "sgd"),
    DeepCase("mlp-norm", lambda: _Head(nn.Sequential(nn.Linear(40, 160), nn.BatchNorm1d(160), nn.ReLU(), nn.Linear(160, 96), nn.LayerNorm(96), nn.Linear(96, 4))), _rows(40), _xent, "adam"),
    DeepCase("embedding-mlp", lambda: EmbeddingMLP(384, 16, 256), _embedded, _xent, "adam"),
    DeepCase("bag", _Bag, lambda n: (torch.randint(0, 3000, (n, 12)), torch.randint(0, 4, (n,))), _xent, "adam"),
    DeepCase("text-tiny", lambda: TextClassifier(800, 32, 4, 1, 32), _tokens(800, 32), _xent, "adam"),
    DeepCase("text-narrow", lambda: TextClassifier(1200, 48, 4, 2, 48), _tokens(1200, 48), _xent, "adam"),
    DeepCase("cnn", _conv_net, _labelled_images(3, 24), _xent, "sgd"),
    DeepCase("autoencoder-8", lambda: ConvAutoencoder64(8), _images, _mse, "sgd"),
    DeepCase("autoencoder-12", lambda: ConvAutoencoder64(12), _images, _mse, "adam"),
    DeepCase("decoder-1d", _decoder_1d, _signals, _mse, "adam"),
    DeepCase("lstm", lambda: _Recurrent(nn.LSTM), lambda n: (torch.randint(0, 500, (n, 24)), torch.randint(0, 4, (n,))), _xent, "adam"),
    DeepCase("gru", lambda: _Recurrent(nn.GRU), lambda n: (torch.randint(0, 500, (n, 24)), torch.randint(0, 4, (n,))), _xent, "sgd"),
]  # fmt: skip
BATCHES = (3, 12)
THREADS = (1, 2)


def relative_error(case: DeepCase, n: int) -> float:
    torch.manual_seed(0)
    est = estimate_training_memory(
        case.build(),
        case.make_batch(n),
        loss_fn=case.loss_fn,
        optimizer=case.optimizer,
        device="cpu",
        iterations=2,
    )
    measured = step_peak(case, n)
    return (est.peak_allocated_bytes - measured) / measured


def calibrate() -> dict[str, list[float]]:
    errors: dict[str, list[float]] = defaultdict(list)
    before = torch.get_num_threads()
    try:
        for case in CASES:
            kinds = layer_kinds(case.build())
            for threads in THREADS:
                torch.set_num_threads(threads)
                for n in BATCHES:
                    err = relative_error(case, n)
                    print(
                        f"{case.name:16s} threads={threads} batch={n:3d} error={100 * err:+7.3f}%  {sorted(kinds)}"
                    )
                    for kind in kinds:
                        errors[kind].append(err)
    finally:
        torch.set_num_threads(before)
    return dict(errors)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu", choices=["cpu"])
    parser.add_argument("--dry-run", action="store_true", help="print, do not write the table")
    args = parser.parse_args()
    started = time.perf_counter()
    errors = calibrate()
    table = json.loads(TABLE_PATH.read_text()) if TABLE_PATH.exists() else {}
    devices = table.get("devices", {})
    devices[args.device] = {kind: summarize(values) for kind, values in sorted(errors.items())}
    table = {
        "generated_by": "bench/memory_calibration.py",
        "torch": torch.__version__.split("+")[0],
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "devices": devices,
    }
    print(f"\n{'kind':16s} {'n':>4s} {'min':>8s} {'max':>8s} {'std':>8s} {'margin':>8s}")
    for kind, row in devices[args.device].items():
        margin = margin_for_kinds([kind], args.device, table)
        print(f"{kind:16s} {row['count']:4d} {100 * row['min']:+7.3f}% {100 * row['max']:+7.3f}% "
              f"{100 * row['std']:7.3f}% {100 * margin:7.2f}%  (kind margin {100 * kind_margin(row):.2f}%)")  # fmt: skip
    print(f"{time.perf_counter() - started:.0f} s")
    if not args.dry_run:
        TABLE_PATH.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
        print(f"wrote {TABLE_PATH.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
