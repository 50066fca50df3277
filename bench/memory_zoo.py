"""Accuracy benchmark of the training-memory estimator (issue 4).

For every zoo model, batch size and optimizer (SGD, Adam) it prints the measured peak, the
estimate of ``workers.memory`` and of PyTorch's ``MemTracker`` (under FakeTensorMode, same fake
model and same loop), their relative errors and the estimation time.

CPU: measured peak = live tensor bytes before training (parameters, buffers, batch) + the highest
running sum of the ``[memory]`` allocation/free events torch.profiler(profile_memory=True) records
during 3 real training steps of a fresh model.
CUDA (``--device cuda``): ``max_memory_allocated()`` / ``max_memory_reserved()`` after 3 steps,
each measured in a fresh child process.

    python bench/memory_zoo.py [--quick] [--device cpu|cuda] [--models a,b] [--no-memtracker] [--threads N]

The estimation time of every row is printed, wall (est.s) and CPU (cpu.s, process time: the
machine may be shared), with the worst cases; the first estimate of a
process (one-time initialisation) is done on a throw-away model first and printed apart.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402
from torch.utils._pytree import tree_flatten, tree_map_only  # noqa: E402

from bench._memory_zoo_models import ZOO, ZooEntry  # noqa: E402
from workers.memory import estimate_training_memory  # noqa: E402
from workers.memory.cuda_model import CudaTarget, move_to_fake_cuda  # noqa: E402
from workers.memory.loop import build_optimizer, run_training  # noqa: E402
from workers.memory.trace import fake_batch, fake_model  # noqa: E402

OPTIMIZERS = ("sgd", "adam")
MIB = 1024 * 1024


@dataclass
class Row:
    model: str
    params: int
    batch: int
    optimizer: str
    measured: int
    ours: int
    ours_seconds: float
    ours_cpu_seconds: float
    memtracker: int | None
    measured_reserved: int | None = None
    ours_reserved: int | None = None

    def err(self, estimate: int | None, measured: int | None = None) -> float | None:
        base = self.measured if measured is None else measured
        if estimate is None or not base:
            return None
        return (estimate - base) / base


# -- measurement -------------------------------------------------------------------------------
def _live_bytes(model: torch.nn.Module, batch: Any) -> int:
    tensors = [*model.parameters(), *model.buffers(), *tree_flatten(batch)[0]]
    storages = {
        id(t.untyped_storage()): t.untyped_storage().nbytes() for t in tensors if isinstance(t, torch.Tensor)
    }
    return sum(storages.values())


def measure_cpu(entry: ZooEntry, batch_size: int, optimizer: str) -> int:
    from torch.profiler import ProfilerActivity, profile

    torch.manual_seed(0)
    model = entry.build()
    batch = entry.make_batch(batch_size)
    opt = build_optimizer([p for p in model.parameters() if p.requires_grad], optimizer)
    before = _live_bytes(model, batch)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        run_training(model, batch, opt, loss_fn=entry.loss_fn, iterations=3)
    # The kineto event list holds every [memory] event; FunctionEvent lists fold the ones nested
    # in an op into that op, so they are read here in allocation order instead.
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    events = [
        e
        for e in events
        if e.device_type() == torch.device("cpu").type or str(e.device_type()).endswith("CPU")
    ]
    events.sort(key=lambda e: e.start_ns())
    running = peak = 0
    for event in events:
        running += event.nbytes()
        peak = max(peak, running)
    return before + peak


def measure_cuda_child(name: str, batch_size: int, optimizer: str) -> dict[str, int]:
    entry = _entry(name)
    torch.manual_seed(0)
    model = entry.build().to("cuda")
    batch = tree_map_only(torch.Tensor, lambda t: t.to("cuda"), entry.make_batch(batch_size))
    opt = build_optimizer([p for p in model.parameters() if p.requires_grad], optimizer)
    run_training(model, batch, opt, loss_fn=entry.loss_fn, iterations=3, device_type="cuda")
    torch.cuda.synchronize()
    return {
        "allocated": torch.cuda.max_memory_allocated(),
        "reserved": torch.cuda.max_memory_reserved(),
    }


def measure_cuda(entry: ZooEntry, batch_size: int, optimizer: str) -> dict[str, int]:
    # A fresh process per row: the caching allocator must start empty, as in a real job.
    cmd = [sys.executable, __file__, "--child", f"{entry.name}:{batch_size}:{optimizer}"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=os.environ.copy())
    return json.loads(out.stdout.strip().splitlines()[-1])


# -- estimators --------------------------------------------------------------------------------
def estimate_ours(
    entry: ZooEntry, batch_size: int, optimizer: str, device: str
) -> tuple[int, int, float, float]:
    torch.manual_seed(0)
    model = entry.build()
    batch = entry.make_batch(batch_size)
    target = CudaTarget(compute_capability=torch.cuda.get_device_capability()) if device == "cuda" else None
    started, cpu_started = time.perf_counter(), time.process_time()
    est = estimate_training_memory(
        model, batch, loss_fn=entry.loss_fn, optimizer=optimizer, device=device, cuda_target=target
    )
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    return est.peak_allocated_bytes, est.peak_reserved_bytes, wall, cpu


def estimate_memtracker(entry: ZooEntry, batch_size: int, optimizer: str, device: str) -> int | None:
    from torch.distributed._tools.mem_tracker import MemTracker

    torch.manual_seed(0)
    model = entry.build()
    batch = entry.make_batch(batch_size)
    mode = FakeTensorMode()
    fmodel, fbatch = fake_model(model, mode), fake_batch(batch, mode)
    if device == "cuda":
        fmodel, fbatch = move_to_fake_cuda(fmodel, fbatch, mode)
    try:
        with mode:
            opt = build_optimizer([p for p in fmodel.parameters() if p.requires_grad], optimizer)
            tracker = MemTracker()
            tracker.track_external(
                fmodel, opt, *[t for t in tree_flatten(fbatch)[0] if isinstance(t, torch.Tensor)]
            )
            with tracker:
                run_training(
                    fmodel,
                    fbatch,
                    opt,
                    loss_fn=entry.loss_fn,
                    iterations=3,
                    device_type=device,
                    phase=_reset_each_iteration(tracker),
                )
            peaks = tracker.get_tracker_snapshot("peak")
    except Exception as exc:  # MemTracker is the reference, not the subject: report, go on
        print(f"  memtracker failed on {entry.name}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return None
    return max((snap.get("Total", 0) for dev, snap in peaks.items() if dev.type == device), default=0)


def _reset_each_iteration(tracker: Any) -> Any:
    # MemTracker refuses a second forward of a module unless its per-module stats are reset;
    # the global peak survives the reset.
    @contextlib.contextmanager
    def phase(name: str, iteration: int) -> Iterator[None]:
        yield
        if name == "zero_grad":
            tracker.reset_mod_stats()

    return phase


# -- table -------------------------------------------------------------------------------------
def _pct(value: float | None) -> str:
    return "   n/a" if value is None else f"{100 * value:+6.2f}%"


def _mib(value: int | None) -> str:
    return "n/a" if value is None else f"{value / MIB:9.2f}"


def print_header(device: str) -> None:
    extra = "  meas.res  ours.res  err.res" if device == "cuda" else ""
    print(
        f"{'model':<16} {'params':>10} {'bs':>4} {'opt':<5} {'measured':>9} {'ours':>9} {'err':>8} "
        f"{'memtrack':>9} {'err.MT':>8} {'est.s':>6} {'cpu.s':>6}{extra}   (MiB)"
    )


def print_row(row: Row, device: str) -> None:
    line = (
        f"{row.model:<16} {row.params:>10,} {row.batch:>4} {row.optimizer:<5} {_mib(row.measured)} "
        f"{_mib(row.ours)} {_pct(row.err(row.ours))} {_mib(row.memtracker)} "
        f"{_pct(row.err(row.memtracker))} {row.ours_seconds:6.2f} {row.ours_cpu_seconds:6.2f}"
    )
    if device == "cuda":
        line += (
            f" {_mib(row.measured_reserved)} {_mib(row.ours_reserved)} "
            f"{_pct(row.err(row.ours_reserved, row.measured_reserved))}"
        )
    print(line, flush=True)


def summarize(rows: list[Row], device: str) -> None:
    ours = [abs(e) for r in rows if (e := r.err(r.ours)) is not None]
    mt = [abs(e) for r in rows if (e := r.err(r.memtracker)) is not None]
    print()
    print(f"rows: {len(rows)}")
    print(
        f"ours       |error| (allocated): median {100 * statistics.median(ours):.2f}%  max {100 * max(ours):.2f}%"
    )
    if mt:
        print(
            f"MemTracker |error| (allocated): median {100 * statistics.median(mt):.2f}%  max {100 * max(mt):.2f}%  ({len(mt)} rows)"
        )
    slowest = max(rows, key=lambda r: r.ours_seconds)
    busiest = max(rows, key=lambda r: r.ours_cpu_seconds)
    print(
        f"estimation time: wall max {slowest.ours_seconds:.2f} s ({slowest.model}, bs {slowest.batch}, "
        f"{slowest.optimizer}), median {statistics.median(r.ours_seconds for r in rows):.2f} s; "
        f"CPU max {busiest.ours_cpu_seconds:.2f} s ({busiest.model}, bs {busiest.batch}, "
        f"{busiest.optimizer}), median {statistics.median(r.ours_cpu_seconds for r in rows):.2f} s; "
        f"torch threads {torch.get_num_threads()}, load average {os.getloadavg()[0]:.1f} "
        f"on {os.cpu_count()} cores"
    )
    big = [r for r in rows if r.params >= 50_000_000]
    for r in big:
        print(
            f"estimation time, {r.model} ({r.params / 1e6:.0f}M params, {r.optimizer}): "
            f"{r.ours_seconds:.2f} s wall, {r.ours_cpu_seconds:.2f} s CPU"
        )
    if device == "cpu":
        ok = statistics.median(ours) <= 0.01 and max(ours) <= 0.03
        print(f"CPU targets (median <= 1%, max <= 3%): {'MET' if ok else 'NOT MET'}")
    else:
        res = [r.err(r.ours_reserved, r.measured_reserved) for r in rows]
        res = [e for e in res if e is not None]
        ok = statistics.median(abs(e) for e in res) <= 0.02 and min(res) >= -0.05
        print(
            f"reserved |error|: median {100 * statistics.median(abs(e) for e in res):.2f}%  "
            f"worst under {100 * min(res):+.2f}%"
        )
        print(f"CUDA targets (reserved median <= 2%, never > 5% under): {'MET' if ok else 'NOT MET'}")


def _warm_up(device: str) -> None:
    """One throw-away estimate: the first one in a process pays one-time initialisation (fake
    tensor and dispatcher caches, lazy imports), which is not the cost of estimating a model."""
    started = time.perf_counter()
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    estimate_training_memory(
        model, torch.randn(4, 8), loss_fn=lambda out, batch: out.sum(), optimizer="sgd", device=device
    )
    print(f"(first estimate in this process, a 2-layer MLP: {time.perf_counter() - started:.2f} s)")


def _entry(name: str) -> ZooEntry:
    return next(e for e in ZOO if e.name == name)


def run(args: argparse.Namespace) -> list[Row]:
    entries = [e for e in ZOO if (not args.quick or e.quick)]
    if args.models:
        wanted = set(args.models.split(","))
        entries = [e for e in entries if e.name in wanted]
    rows: list[Row] = []
    _warm_up(args.device)
    print_header(args.device)
    for entry in entries:
        params = sum(p.numel() for p in entry.build().parameters())
        sizes = entry.batch_sizes[:1] if args.quick else entry.batch_sizes
        for batch_size in sizes:
            for optimizer in OPTIMIZERS:
                rows.append(_row(entry, params, batch_size, optimizer, args))
                print_row(rows[-1], args.device)
    summarize(rows, args.device)
    return rows


def _row(entry: ZooEntry, params: int, batch_size: int, optimizer: str, args: argparse.Namespace) -> Row:
    allocated, reserved, seconds, cpu_seconds = estimate_ours(entry, batch_size, optimizer, args.device)
    mt = None if args.no_memtracker else estimate_memtracker(entry, batch_size, optimizer, args.device)
    if args.device == "cuda":
        measured = measure_cuda(entry, batch_size, optimizer)
        return Row(
            entry.name,
            params,
            batch_size,
            optimizer,
            measured["allocated"],
            allocated,
            seconds,
            cpu_seconds,
            mt,
            measured["reserved"],
            reserved,
        )
    measured_cpu = measure_cpu(entry, batch_size, optimizer)
    return Row(entry.name, params, batch_size, optimizer, measured_cpu, allocated, seconds, cpu_seconds, mt)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--quick", action="store_true", help="a few models, one batch size")
    parser.add_argument("--models", default="", help="comma-separated zoo names")
    parser.add_argument("--no-memtracker", action="store_true")
    parser.add_argument(
        "--threads",
        type=int,
        default=0,
        help="torch threads (oneDNN scratch depends on it); default: all cores",
    )
    parser.add_argument("--child", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(args.threads or max(1, os.cpu_count() or 1))
    if args.child:
        name, bs, opt = args.child.split(":")
        print(json.dumps(measure_cuda_child(name, int(bs), opt)))
        return
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("--device cuda needs a CUDA build of torch and a visible GPU")
    run(args)


if __name__ == "__main__":
    main()
