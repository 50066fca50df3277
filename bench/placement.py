"""Placement benchmark (issue 11): one job per GPU vs rule-of-thumb packing vs estimate-based packing.

A trace of retraining jobs drawn from the estimator's model zoo (bench/_memory_zoo_models.py: every
model at two batch sizes, 8x and 32x its zoo batch, with SGD and with Adam) is placed on 4
simulated 24 GiB GPUs by the same placer (workers.placement: best fit, queue order, starvation
bound) under three sizing policies:

  (a) one job per device      each job reserves a whole GPU;
  (b) rule of thumb           weights + gradients + optimizer state (2 x params for Adam, 1 x for
                              SGD momentum) + 20 %, as `accelerate estimate-memory` suggests, plus
                              the CUDA context; nothing caps a job (the common practice), so the job
                              that pushes its GPU past capacity runs out of memory;
  (c) driftwatch              workers.memory's estimate (peak reserved) + 10 % margin + CUDA
                              context, each job capped at its reservation.

True peak of a job: the CUDA caching-allocator replay (workers.memory.allocator) of the job's full
3-step training trace at its real shapes, plus the 512 MiB CUDA context. It is recorded on fake
tensors (no machine here has 24 GiB GPUs), so it is the same trace (c) estimates from: (c)'s 0 OOM
shows that the placer never over-commits given the estimator; how close that trace is to real runs
is measured by bench/memory_zoo.py. ``--estimate-error -0.08`` makes every (c) estimate 8 % too low
to show what the margin absorbs.
Durations: seeded (``--seed``), log-uniform between 10 and 120 minutes, independent of memory.
A job that runs out of memory is counted once and re-run alone on a GPU (what an operator does).

    python bench/placement.py [--quick] [--jobs N] [--seed S] [--estimate-error E]
"""

from __future__ import annotations

import argparse
import math
import os
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from bench._memory_zoo_models import ZOO, ZooEntry  # noqa: E402
from workers.memory import estimate_training_memory  # noqa: E402
from workers.placement.devices import CUDA_CONTEXT_BYTES, GIB, reservation_bytes  # noqa: E402
from workers.placement.simulation import SimJob, SimResult, simulate  # noqa: E402

DEVICES = {f"sim{i}": 24 * GIB for i in range(4)}
BATCH_SCALES = (8, 32)
OPTIMIZERS = ("sgd", "adam")
QUICK_MODELS = ("tabular_mlp", "resnet18", "vgg_small", "conv1d", "lstm", "gpt2_decoder")


@dataclass(frozen=True)
class Config:
    model: str
    batch: int
    optimizer: str


@dataclass(frozen=True)
class Sizes:
    params_bytes: int
    estimated_reserved: int  # what (c) plans with
    true_bytes: int  # allocator replay of the job's trace + CUDA context


_SIZES: dict[Config, Sizes] = {}  # in-process cache: each config is traced once


def sizes(entry: ZooEntry, config: Config) -> Sizes:
    if config not in _SIZES:
        torch.manual_seed(0)
        model = entry.build()
        params = sum(p.numel() * p.element_size() for p in model.parameters())
        est = estimate_training_memory(
            model,
            entry.make_batch(config.batch),
            loss_fn=entry.loss_fn,
            optimizer=config.optimizer,
            device="cuda",
            iterations=3,
        )
        _SIZES[config] = Sizes(params, est.peak_reserved_bytes, est.device_total_bytes)
    return _SIZES[config]


def rule_of_thumb(params_bytes: int, optimizer: str) -> int:
    """weights + grads + optimizer state (Adam: 2 moments, SGD: momentum), + 20 %."""
    copies = 4 if optimizer == "adam" else 3
    return math.ceil(params_bytes * copies * 1.2)


def trace(args: argparse.Namespace) -> list[tuple[Config, Sizes, float]]:
    entries = [e for e in ZOO if not args.quick or e.name in QUICK_MODELS]
    configs = [
        (e, Config(e.name, e.batch_sizes[-1] * scale, opt))
        for e in entries
        for scale in BATCH_SCALES
        for opt in OPTIMIZERS
    ]
    rng = random.Random(args.seed)
    jobs = []
    for i in range(max(args.jobs, len(configs))):
        entry, config = configs[i % len(configs)]
        minutes = math.exp(rng.uniform(math.log(10), math.log(120)))
        jobs.append((config, sizes(entry, config), minutes * 60.0))
    return jobs


def run_policy(policy: str, jobs: list[tuple[Config, Sizes, float]], estimate_error: float) -> SimResult:
    sim_jobs = []
    for i, (config, s, seconds) in enumerate(jobs):
        if policy == "a":
            need = 24 * GIB
        elif policy == "b":
            need = rule_of_thumb(s.params_bytes, config.optimizer) + CUDA_CONTEXT_BYTES
        else:
            need = reservation_bytes(int(s.estimated_reserved * (1.0 + estimate_error)))
        sim_jobs.append(SimJob(f"{i}:{config.model}", need, seconds, true_bytes=s.true_bytes))
    return simulate(sim_jobs, DEVICES, isolation=policy != "b", retry="alone")


def utilisation(result: SimResult) -> float:
    return result.byte_seconds / (sum(DEVICES.values()) * result.makespan)


def max_jobs_per_device(result: SimResult) -> int:
    """The most jobs that ran at once on one GPU."""
    events = sorted(
        (t, +1 if t == o.start else -1, o.device)
        for o in result.outcomes
        if o.status == "succeeded"
        for t in (o.start, o.end)
    )
    running: dict[str, int] = {}
    most = 0
    for _, step, device in sorted(events, key=lambda e: (e[0], e[1])):
        running[device] = running.get(device, 0) + step
        most = max(most, running[device])
    return most


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help=f"only {', '.join(QUICK_MODELS)}")
    parser.add_argument("--jobs", type=int, default=50, help="at least this many jobs (configs repeat)")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--estimate-error", type=float, default=0.0, help="scale (c)'s estimates by 1+E")
    args = parser.parse_args()
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    started = time.perf_counter()
    jobs = trace(args)
    traced = time.perf_counter() - started
    true = [s.true_bytes for _, s, _ in jobs]
    print(
        f"{len(jobs)} jobs ({len(_SIZES)} distinct configs traced in {traced:.0f} s), 4 x 24 GiB simulated GPUs; "
        f"true peaks {min(true) / GIB:.2f}-{max(true) / GIB:.2f} GiB (sum {sum(true) / GIB:.0f} GiB), "
        f"seed {args.seed}, (c) estimate error {args.estimate_error:+.0%}"
    )
    print(
        f"{'policy':<34} {'makespan h':>10} {'vs (a)':>8} {'avg mem util':>12} {'OOM jobs':>8} {'max jobs/GPU':>12}"
    )
    results = {p: run_policy(p, jobs, args.estimate_error) for p in "abc"}
    names = {
        "a": "(a) one job per device",
        "b": "(b) rule of thumb (accelerate)",
        "c": "(c) driftwatch estimate",
    }
    base = results["a"].makespan
    for policy, result in results.items():
        crowd = max_jobs_per_device(result)
        print(
            f"{names[policy]:<34} {result.makespan / 3600:10.2f} {result.makespan / base - 1:+8.1%} "
            f"{utilisation(result):12.1%} {len(result.oom_jobs):8d} {crowd:12d}"
        )
    c = results["c"]
    met = not c.oom_jobs and c.makespan <= 0.6 * base
    print(f"target ((c) 0 OOM and makespan >= 40% shorter than (a)): {'MET' if met else 'NOT MET'}")


if __name__ == "__main__":
    main()
