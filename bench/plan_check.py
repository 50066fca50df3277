"""Do the batch plans hold? plan_batch_size on the CPU against real training runs (issue 14).

For every zoo model and three CPU budgets, ``plan_batch_size(..., device="cpu")`` picks a batch;
that batch is then trained for real (3 steps of ``workers.memory.loop``, peak measured as
bench/memory_zoo.py measures it: live bytes before training + the highest running sum of
torch.profiler's memory events), and a search over real runs finds the true largest batch whose
measured peak fits the budget. The budgets lie halfway between the real peaks at n and n + 1
rows, for n = half, once and twice the zoo's batch size, so each has one true answer.

Per row: the budget, the chosen batch, the true largest batch, chosen/true, the measured peak of the
chosen batch against the budget, and the planner's traces and time. Targets: no chosen batch
exceeds its budget when run; chosen >= 90% of the true largest batch in every row.

The planner's margin is a policy knob (10% by default, for CUDA's unmeasured parts); here it is
``--margin``, default 0: on the CPU the estimator's worst under-estimate in bench/memory_zoo.py is
0.1%, and for models whose memory barely grows with the batch (a small MLP: weights and Adam state
dominate) any margin of a few percent is worth tens of rows, which would hide what is checked here:
whether the estimate itself picks the right batch.

    python bench/plan_check.py [--quick] [--models a,b] [--threads N] [--margin 0.0]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from bench._memory_zoo_models import ZOO, ZooEntry  # noqa: E402
from bench.memory_zoo import measure_cpu  # noqa: E402
from workers.memory import plan_batch_size  # noqa: E402

MIB = 1024 * 1024
OPTIMIZER = "adam"
QUICK_MODELS = ("tabular_mlp", "conv_autoencoder", "bigru", "bert_encoder")


@dataclass
class PlanRow:
    model: str
    budget: int
    chosen: int
    true_max: int
    chosen_peak: int
    traces: int
    seconds: float

    @property
    def ratio(self) -> float:
        return self.chosen / self.true_max if self.true_max else float("nan")

    @property
    def within_budget(self) -> bool:
        return self.chosen_peak <= self.budget


class _Measured:
    """Real peaks per batch size, each measured once (fresh model, 3 training steps)."""

    def __init__(self, entry: ZooEntry) -> None:
        self.entry = entry
        self.peaks: dict[int, int] = {}

    def __call__(self, batch: int) -> int:
        if batch not in self.peaks:
            self.peaks[batch] = measure_cpu(self.entry, batch, OPTIMIZER)
        return self.peaks[batch]


def budgets(measured: _Measured, entry: ZooEntry) -> list[int]:
    """Halfway between the real peaks at n and n + 1 rows, for n = half, once and twice the zoo's
    batch size: each budget has one true answer, n (peaks grow with the batch)."""
    base = entry.batch_sizes[0]
    sizes = sorted({max(2, base // 2), base, 2 * base})
    return [(measured(n) + measured(n + 1)) // 2 for n in sizes]


def true_largest(measured: _Measured, budget: int, start: int, limit: int) -> int:
    """Largest batch whose real peak fits, searched from ``start`` one batch at a time (peaks grow
    with the batch, and the planner's answer is close, so this takes few real runs)."""
    batch = max(1, start)
    if measured(batch) <= budget:
        while batch < limit and measured(batch + 1) <= budget:
            batch += 1
        return batch
    while batch > 1 and measured(batch - 1) > budget:
        batch -= 1
    return batch - 1


def check(entry: ZooEntry, margin: float, limit: int) -> list[PlanRow]:
    measured = _Measured(entry)
    rows = []
    for budget in budgets(measured, entry):
        torch.manual_seed(0)
        started = time.perf_counter()
        plan = plan_batch_size(
            entry.build(),
            entry.make_batch,
            budget,
            loss_fn=entry.loss_fn,
            optimizer=OPTIMIZER,
            device="cpu",
            margin=margin,
            max_batch=limit,
            allow_alternatives=False,
        )
        seconds = time.perf_counter() - started
        chosen = plan.batch_size if plan.fits else 0
        true_max = true_largest(measured, budget, chosen or 2, limit)
        peak = measured(chosen) if chosen else 0
        rows.append(PlanRow(entry.name, budget, chosen, true_max, peak, plan.traces, seconds))
    return rows


def print_row(row: PlanRow) -> None:
    verdict = "ok" if row.within_budget else "OVER"
    print(
        f"{row.model:<18} {row.budget / MIB:9.2f} {row.chosen:>6} {row.true_max:>6} {row.ratio:>7.2f} "
        f"{row.chosen_peak / MIB:10.2f} {verdict:>5} {row.traces:>6} {row.seconds:7.2f}",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help=f"only {', '.join(QUICK_MODELS)}")
    parser.add_argument("--models", default="", help="comma-separated zoo names")
    parser.add_argument("--threads", type=int, default=0, help="torch threads; default: all cores")
    parser.add_argument("--margin", type=float, default=0.0)
    parser.add_argument("--max-batch", type=int, default=256)
    args = parser.parse_args()
    torch.set_num_threads(args.threads or max(1, os.cpu_count() or 1))
    entries = [e for e in ZOO if not args.quick or e.name in QUICK_MODELS]
    if args.models:
        entries = [e for e in entries if e.name in set(args.models.split(","))]
    print(f"optimizer {OPTIMIZER}, margin {args.margin:.0%}, torch threads {torch.get_num_threads()}")
    print(
        f"{'model':<18} {'budget':>9} {'chosen':>6} {'true':>6} {'ch/true':>7} {'peak@ch':>10} "
        f"{'fits':>5} {'traces':>6} {'plan.s':>7}   (MiB)"
    )
    rows: list[PlanRow] = []
    for entry in entries:
        for row in check(entry, args.margin, args.max_batch):
            rows.append(row)
            print_row(row)
    over = [r for r in rows if not r.within_budget]
    worst = min(rows, key=lambda r: r.ratio)
    print()
    print(f"rows: {len(rows)}; chosen batch over its budget when run: {len(over)}")
    print(f"chosen/true: min {worst.ratio:.2f} ({worst.model}, budget {worst.budget / MIB:.1f} MiB)")
    ok = not over and all(r.ratio >= 0.9 for r in rows)
    print(f"targets (none over budget, chosen >= 90% of the true largest): {'MET' if ok else 'NOT MET'}")


if __name__ == "__main__":
    main()
