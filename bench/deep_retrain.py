"""Deep models sized for a simulated device with no trial runs, against trial-and-OOM finders (issue 23).

Five deep models (bench/_deep_models.py): a torch.nn transformer-encoder text classifier at two
sizes, an MLP on sentence embeddings + tabular features, the team's own conv autoencoder (Conv2d
down, ConvTranspose2d up, 64x64), and the team's own 1-d CNN text classifier through the
custom-recipe path as a retraining job plans it (``team-cnn (recipe)``: a recipe naming
bench/team_models.py's factory, allowed as an operator lists a module in DRIFTWATCH_RECIPE_MODULES;
``engine.prepare`` fits the tokenizer; ``engine.plan_training`` plans on the job's own batches, the
longest texts). For each simulated CPU device cap:

- true maximum batch: bisection against the cap, each probe a real training step (optimizer state
  already allocated) whose allocations torch.profiler records; bracketed from the planner's guess,
  every bracket end measured, to 1% (the figure shown is the smallest batch measured to fail, - 1);
- the planner (``plan_batch_size``, default margin from workers/memory/error_table.json): its batch,
  traces, planning time (wall and CPU) with the planner's trace cache cleared before each row (a cold
  plan; the per-shape oneDNN calibrations in workers/memory/cpu_kernels stay for the process, as a
  worker's do), and beside it a warm re-plan of the same row from the cache; target batch >= 90% of
  the true maximum, planning <= 5 s and <= 1% of an epoch over the case's training set (50,000 rows;
  1,000,000 for the embedding MLP, an embedding service's retraining window: at the planned batch of
  5,000-20,000 rows, 50,000 rows were 3-11 steps; its share at 50,000 rows is printed too), the
  epoch's time extrapolated from the measured steps;
- 0 OOMs: a whole epoch (2 steps over 2 batches of the planned size), an evaluation pass and a
  checkpoint save (torch.save of model + optimizer) in one profiled run, its peak <= the cap;
- beside it (not for the recipe case: the peers' venv has no project), the real Lightning BatchSizeFinder (power, binsearch; init 2, 1 step per trial, max_val the
  planner's max batch: its default 8192 returns 8192 untried, invalid for the embedding MLP) and
  Accelerate's find_executable_batch_size (starting at the same max batch the planner gets), run in
  the peers venv on the same model and data: their trials, OOMs, seconds, chosen batch. Their
  simulated OOMs (bench/_deep_models.CapOracle) cost no time, so their seconds are a lower bound.

kill -9 at a random step and resume: bench/deep_resume.py. CUDA: not available.

Peers venv (outside the project's requirements; lightning 2.6.6 and accelerate 1.15.0 keep torch 2.13.0):
    python3.11 -m venv /work/venvs/deep-peers && /work/venvs/deep-peers/bin/pip install torch==2.13.0 \
        && /work/venvs/deep-peers/bin/pip install lightning==2.6.6 accelerate==1.15.0
Run (2-core box: --cap-scale shrinks the 1/2/4 GiB caps, compute grows with the cap):
    nice -n 10 python bench/deep_retrain.py [--cap-scale 0.0625] [--cases a,b] [--no-peers]
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from bench._deep_models import (  # noqa: E402
    DeepCase,
    build_optimizer,
    cases,
    live_bytes,
    probe_peak,
    profiled_peak,
    team_recipe_case,
    train_step,
)
from workers.memory import plan_batch_size  # noqa: E402
from workers.memory.planner import clear_trace_cache  # noqa: E402

GIB = 1 << 30
MAX_BATCH = 65536
EPOCH_ROWS = 50_000
PEERS_PYTHON = Path(os.environ.get("DEEP_PEERS_PYTHON", "/work/venvs/deep-peers/bin/python"))
FINDERS = ["lightning-power", "lightning-binsearch", "accelerate"]


@dataclass
class Result:
    case: str
    cap: int
    true_max: int = 0
    fits: int = 0
    probes: int = 0
    plan_batch: int = 0
    plan_seconds: float = 0.0
    plan_cpu_seconds: float = 0.0  # process time: the 2-core machine is shared
    plan_traces: int = 0
    warm_seconds: float = 0.0  # the same plan again, its traces from the planner's cache
    epoch_rows: int = EPOCH_ROWS
    margin: float = 0.0
    epoch_peak: int = 0
    step_seconds: float = 0.0
    peers: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ratio(self) -> float:
        return self.plan_batch / max(1, self.true_max)

    def epoch_seconds_at(self, rows: int) -> float:
        return self.step_seconds * math.ceil(rows / max(1, self.plan_batch))

    @property
    def epoch_seconds(self) -> float:
        return self.epoch_seconds_at(self.epoch_rows)

    @property
    def share(self) -> float:
        return self.plan_seconds / max(1e-9, self.epoch_seconds)

    def checks(self) -> dict[str, bool]:
        return {
            "batch >= 90% of true max": self.ratio >= 0.9,
            "batch <= true max": self.plan_batch <= self.true_max,
            "0 OOM (epoch+eval+ckpt)": self.epoch_peak <= self.cap,
            "planning <= 5 s wall": self.plan_seconds <= 5.0,
            "planning <= 5 s cpu": self.plan_cpu_seconds <= 5.0,
            "planning <= 1% of epoch": self.share <= 0.01,
        }


def true_maximum(case: DeepCase, cap: int, guess: int, result: Result) -> None:
    """Bisection on real steps: ``fits`` measured to fit, ``fails`` measured not to (or MAX_BATCH + 1)."""

    def fits(n: int) -> bool:
        result.probes += 1
        return probe_peak(case, n) <= cap

    lo, hi = max(1, int(guess * 0.97)), min(MAX_BATCH + 1, int(guess * 1.03) + 2)
    while lo > 1 and not fits(lo):
        hi, lo = lo, max(1, lo // 2)
    while hi <= MAX_BATCH and fits(hi):
        lo, hi = hi, min(MAX_BATCH + 1, hi * 2)
    while hi - lo > max(1, lo // 100):
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    result.fits, result.true_max = lo, hi - 1


def plan(case: DeepCase, cap: int, result: Result) -> None:
    torch.manual_seed(0)
    model = case.build()
    clear_trace_cache()  # each row is planned cold: no trace of this model from an earlier row

    def run() -> tuple[int, int, float]:
        if case.plan is not None:  # the job's own planning (engine.plan_training on its recipe)
            return case.plan(cap)
        p = plan_batch_size(
            model, case.make_batch, cap, loss_fn=case.loss_fn, optimizer=case.optimizer, device="cpu",
            max_batch=MAX_BATCH,
        )  # fmt: skip
        return p.batch_size, p.traces, p.margin

    started, cpu_started = time.perf_counter(), time.process_time()
    result.plan_batch, result.plan_traces, result.margin = run()
    result.plan_seconds = time.perf_counter() - started
    result.plan_cpu_seconds = time.process_time() - cpu_started
    result.epoch_rows = case.epoch_rows
    started = time.perf_counter()
    again = run()
    result.warm_seconds = time.perf_counter() - started
    assert again[:2] == (result.plan_batch, 0)


def epoch_eval_checkpoint(case: DeepCase, n: int, result: Result) -> None:
    """Peak of a 2-step epoch, an evaluation pass over the same rows and a checkpoint save."""
    torch.manual_seed(0)
    model = case.build()
    opt = build_optimizer(model, case.optimizer)
    timings: list[float] = []
    checkpoint = io.BytesIO()

    def run() -> None:
        # Batches come one at a time, as from a data loader (the dataset is not on the device).
        model.train()
        for _ in range(2):
            batch = case.make_batch(n)
            started = time.perf_counter()
            train_step(model, opt, batch, case.loss_fn)
            timings.append(time.perf_counter() - started)
            del batch
        model.eval()
        with torch.no_grad():
            for _ in range(2):
                batch = case.make_batch(n)
                case.loss_fn(model(*batch), batch)
                del batch
        torch.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, checkpoint)

    before = live_bytes(model)
    peak = before + profiled_peak(run)
    # The serialized checkpoint is host bytes the profiler does not see; it exists after training.
    result.epoch_peak = max(peak, live_bytes(model, opt) + checkpoint.getbuffer().nbytes)
    result.step_seconds = min(timings)


def peers(case: DeepCase, cap: int, scale: float, result: Result) -> None:
    if case.plan is not None:
        print("  (peers: not for the custom-recipe case, which needs the project's engine in their venv)")
        return
    if not PEERS_PYTHON.exists():
        print("  (peers venv missing: see the docstring)")
        return
    spec = {
        "case": case.name,
        "scale": scale,
        "cap": cap,
        "fits": result.fits,
        "fails": result.true_max + 1,
        "max_batch": MAX_BATCH,
        "threads": torch.get_num_threads(),
        "finders": FINDERS,
    }
    cmd = [str(PEERS_PYTHON), str(ROOT / "bench" / "_deep_peers.py"), json.dumps(spec)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode != 0:
        print(f"  peers failed: {out.stderr.strip().splitlines()[-1:]}")
    result.peers = [json.loads(line) for line in lines]


def report(result: Result) -> None:
    mib = result.cap / (1 << 20)
    small = ""
    if result.epoch_rows != EPOCH_ROWS:
        small = f" (at {EPOCH_ROWS} rows: {100 * result.plan_seconds / max(1e-9, result.epoch_seconds_at(EPOCH_ROWS)):.2f}%)"
    print(
        f"{result.case:18s} cap {mib:6.0f} MiB  true max {result.true_max:6d} ({result.probes} probes)  "
        f"plan {result.plan_batch:6d} = {100 * result.ratio:5.1f}%  margin {100 * result.margin:.1f}%  "
        f"epoch+eval+ckpt peak {result.epoch_peak / (1 << 20):7.1f} MiB {'OOM' if result.epoch_peak > result.cap else 'ok'}"
    )
    print(
        f"    planning {result.plan_traces} traces: wall {result.plan_seconds:.2f} s, cpu {result.plan_cpu_seconds:.2f} s"
        f" (warm re-plan {result.warm_seconds:.2f} s)  epoch {result.epoch_seconds:.1f} s over {result.epoch_rows} rows"
        f"  share {100 * result.share:.2f}%{small}  load {_load()}"
    )
    print("    " + "  ".join(f"{name}: {'MET' if ok else 'NOT MET'}" for name, ok in result.checks().items()))
    for peer in result.peers:
        print(
            f"    {peer['finder']:20s} trials {peer['trials']:3d}  OOMs {peer['ooms']:3d}  "
            f"{peer['seconds']:7.2f} s  batch {peer['batch']:6d} = {100 * peer['batch'] / max(1, result.true_max):5.1f}%"
        )


def targets(results: list[Result]) -> None:
    checks = {
        "planner batch >= 90% of the true maximum": all(r.ratio >= 0.9 for r in results),
        "planner batch <= true maximum": all(r.plan_batch <= r.true_max for r in results),
        "0 OOMs across epoch + evaluation + checkpoint": all(r.epoch_peak <= r.cap for r in results),
        "0 trial runs (planner runs no training step)": True,
        "planning time <= 5 s (wall)": all(r.plan_seconds <= 5.0 for r in results),
        "planning time <= 5 s (cpu)": all(r.plan_cpu_seconds <= 5.0 for r in results),
        "planning time <= 1% of an epoch": all(r.share <= 0.01 for r in results),
    }
    print()
    for name, met in checks.items():
        print(f"TARGET {name}: {'MET' if met else 'NOT MET'}")
    print(f"load (uptime): {_load()}")
    worst = min(results, key=lambda r: r.ratio)
    slowest = max(results, key=lambda r: r.plan_seconds)
    print(f"(worst ratio {100 * worst.ratio:.1f}% {worst.case} @ {worst.cap >> 20} MiB; slowest plan "
          f"{slowest.plan_seconds:.2f} s, {100 * slowest.plan_seconds / max(1e-9, slowest.epoch_seconds):.2f}% of its epoch)")  # fmt: skip


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def warm_up() -> None:
    """The first estimate of a process pays one-time initialisation (fake tensor and dispatcher
    caches, lazy imports): paid here on a throw-away model and printed apart, as bench/memory_zoo.py does."""
    started = time.perf_counter()
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    plan_batch_size(model, lambda n: torch.randn(n, 8), 1 << 20, loss_fn=lambda o, b: o.sum(), device="cpu")
    print(f"(first plan in this process, a 2-layer MLP: {time.perf_counter() - started:.2f} s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--caps", default="1,2,4", help="GiB, comma-separated")
    parser.add_argument("--cap-scale", type=float, default=1 / 16, help="multiplies every cap")
    parser.add_argument("--cases", default="", help="comma-separated case names (default: all)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-peers", action="store_true")
    parser.add_argument("--peer-caps", default="1", help="caps (GiB, before scaling) the peers run at")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    wanted = set(filter(None, args.cases.split(",")))
    results: list[Result] = []
    peer_caps = {int(float(c) * GIB * args.cap_scale) for c in args.peer_caps.split(",")}
    warm_up()
    print(f"caps {args.caps} GiB x {args.cap_scale:g}, {args.threads} threads, max batch {MAX_BATCH}")
    print(subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    every = [*cases(), team_recipe_case()]  # the recipe's data is prepared once, outside any timing
    for cap in (int(float(c) * GIB * args.cap_scale) for c in args.caps.split(",")):
        for case in (c for c in every if not wanted or c.name in wanted):
            result = Result(case.name, cap)
            plan(case, cap, result)
            true_maximum(case, cap, max(1, result.plan_batch), result)
            epoch_eval_checkpoint(case, max(1, result.plan_batch), result)
            if not args.no_peers and cap in peer_caps:
                peers(case, cap, 1.0, result)
            report(result)
            results.append(result)
    targets(results)
    print(subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())


if __name__ == "__main__":
    main()
