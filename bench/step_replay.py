"""Does a replayed trace equal a full one? workers.memory.step_replay on every zoo model.

For each model of bench/_memory_zoo_models.py (and bench/_deep_models.py's deep recipes), for the CPU
device and the CUDA target, for fp32 and bf16: a trace at batch a records its optimizer steps; a trace
at batch b then runs in full and again with the recording replayed. The two must give the same peak
allocated and reserved bytes and breakdown, and the same events (as a multiset: CPU autocast frees its
weight cache in hash order, differently from run to run); the replayed one's time is printed as a
ratio of a full one's at batch b + 1 (process time, the same process, both on shapes not seen before). Exits 1 on any difference.

    python bench/step_replay.py [--models a,b] [--quick]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from bench._deep_models import cases  # noqa: E402
from bench._memory_zoo_models import ZOO  # noqa: E402
from workers.memory.estimator import estimate_and_trace  # noqa: E402


def _entries(quick: bool) -> list[tuple[str, object, object, object, int]]:
    out: list[tuple[str, object, object, object, int]] = [
        (e.name, e.build, e.make_batch, e.loss_fn, e.batch_sizes[0]) for e in ZOO if e.quick or not quick
    ]
    out += [(c.name, c.build, c.make_batch, c.loss_fn, 8) for c in cases()]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    wanted = set(filter(None, args.models.split(",")))
    torch.set_num_threads(2)
    failures = 0
    ratios: list[float] = []
    for name, build, make_batch, loss_fn, batch in _entries(args.quick):
        if wanted and name not in wanted:
            continue
        torch.manual_seed(0)
        model = build()  # type: ignore[operator]
        for device in ("cpu", "cuda"):
            for amp in (None, "bf16"):
                kw = dict(loss_fn=loss_fn, optimizer="adam", device=device, amp=amp, iterations=2)
                a, b = max(2, batch // 2 + 1), batch + 1
                try:
                    _, probe = estimate_and_trace(model, make_batch(a), **kw)  # type: ignore[operator]
                    # Timed on shapes neither trace has seen (fake-tensor and oneDNN caches are per
                    # shape): the replayed trace at b, the full one at b + 1; compared at b.
                    started = time.process_time()
                    rep_est, rep = estimate_and_trace(
                        model,
                        make_batch(b),  # type: ignore[operator]
                        step_replay=probe.step_replay,
                        **kw,
                    )
                    rep_s = time.process_time() - started
                    started = time.process_time()
                    estimate_and_trace(model, make_batch(b + 1), **kw)  # type: ignore[operator]
                    full_s = time.process_time() - started
                    full_est, full = estimate_and_trace(model, make_batch(b), **kw)  # type: ignore[operator]
                except Exception as exc:  # a model the estimator cannot trace here: say so
                    print(f"{name:22s} {device:4s} {amp or 'fp32':4s} skipped: {type(exc).__name__}: {exc}")
                    continue
                same = (
                    full_est.peak_allocated_bytes == rep_est.peak_allocated_bytes
                    and full_est.peak_reserved_bytes == rep_est.peak_reserved_bytes
                    and full_est.breakdown == rep_est.breakdown
                    and sorted(map(repr, full.events)) == sorted(map(repr, rep.events))
                    and full.category == rep.category
                )
                failures += not same
                replay = probe.step_replay
                kind = "none" if replay is None else ("step+iteration" if replay.repeats else "step")
                ratios.append(rep_s / max(1e-9, full_s))
                print(
                    f"{name:22s} {device:4s} {amp or 'fp32':4s} replayed {kind:14s} "
                    f"{'same' if same else 'DIFFERENT'}  {full_s:6.3f} s -> {rep_s:6.3f} s ({rep_s / max(1e-9, full_s):.2f}x)"
                )
    print(f"\n{len(ratios)} traces, {failures} different; replayed/full time: median "
          f"{sorted(ratios)[len(ratios) // 2]:.2f}x" if ratios else "nothing run")  # fmt: skip
    print(f"TARGET a replayed trace equals the full one: {'MET' if failures == 0 else 'NOT MET'}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
