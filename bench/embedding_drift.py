"""Embedding drift: false alarms, power and cost of the calibrated method (classifier_mw) beside
evidently's default embedding test (model), both as the check runs them.

    .venv/bin/python bench/embedding_drift.py [--runs 40] [--sizes 100,200,500,1000] [--skip-timing]

Data: unit-normalised vectors from a low-rank model (32 latent factors + isotropic noise), as
sentence embeddings look. Shifts: a mean shift in a random 8-dim subspace, a new cluster (a
share of rows moved to a new centre), a mixture-weight change (two clusters, 50/50 → 30/70).
Timing: one 20,000 vs 20,000 × 768 check per method; peak RSS measured in a child process per n.
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import resource
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from workers.features.embedding import (  # noqa: E402
    CLASSIFIER_MW,
    EMBEDDING_METHODS,
    MODEL,
    classifier_mw_of,
    domain_classifier,
    model_of,
)

LATENT = 32
ALPHA = 0.05
Sampler = Callable[[np.random.Generator, int], np.ndarray]


class World:
    """One embedding space: a fixed loading matrix and two cluster centres per dimension."""

    def __init__(self, dim: int, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.dim = dim
        self.loadings = rng.normal(size=(LATENT, dim)) / math.sqrt(LATENT)
        self.centres = rng.normal(size=(2, LATENT)) * 0.8
        self.subspace = np.linalg.qr(rng.normal(size=(dim, 8)))[0]  # 8 orthonormal directions
        self.new_centre = rng.normal(size=dim) * 0.05

    def sample(self, rng: np.random.Generator, n: int, *, weight: float = 0.5) -> np.ndarray:
        which = rng.random(n) < weight
        z = rng.normal(size=(n, LATENT)) + np.where(which[:, None], self.centres[0], self.centres[1])
        x = z @ self.loadings + rng.normal(size=(n, self.dim)) * 0.3
        return x

    @staticmethod
    def normalise(x: np.ndarray) -> np.ndarray:
        return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype("float32")


def shifts(world: World) -> dict[str, Callable[[float], Sampler]]:
    def mean_shift(size: float) -> Sampler:
        direction = world.subspace @ np.ones(8) / math.sqrt(8)
        return lambda rng, n: World.normalise(
            world.sample(rng, n) + size * direction * math.sqrt(world.dim) * 0.3
        )

    def new_cluster(share: float) -> Sampler:
        def draw(rng: np.random.Generator, n: int) -> np.ndarray:
            x = world.sample(rng, n)
            moved = rng.random(n) < share
            x[moved] = (
                world.new_centre * math.sqrt(world.dim) + rng.normal(size=(moved.sum(), world.dim)) * 0.3
            )
            return World.normalise(x)

        return draw

    def mixture(weight: float) -> Sampler:
        return lambda rng, n: World.normalise(world.sample(rng, n, weight=weight))

    return {
        "mean shift (8-dim subspace)": mean_shift,
        "new cluster (share)": new_cluster,
        "mixture weight": mixture,
    }


def rates(world: World, current: Sampler, n: int, runs: int, seed: int) -> tuple[float, float]:
    """(classifier_mw, model) alarm rates: both decisions from the same fitted classifier, as
    each method would fit it (same data, same split, same seed)."""
    rng = np.random.default_rng(seed)
    ours = theirs = 0
    for _ in range(runs):
        reference = World.normalise(world.sample(rng, n))
        held = domain_classifier(reference, current(rng, n))
        if held is None:
            continue
        ours += CLASSIFIER_MW.drifted(*classifier_mw_of(held))
        theirs += MODEL.drifted(*model_of(held, n))
    return ours / runs, theirs / runs


def se(p: float, runs: int) -> float:
    return math.sqrt(p * (1 - p) / runs)


def false_alarms(sizes: list[int], dims: list[int], runs: int) -> None:
    print(f"\n## False alarms on no-drift data ({runs} runs per cell; alpha {ALPHA})")
    print(f"{'dim':>5} {'n/side':>7} | {'classifier_mw':>13} {'<= a+2se':>9} | {'model (evidently)':>17}")
    for dim in dims:
        world = World(dim)
        null = lambda rng, n, w=world: World.normalise(w.sample(rng, n))  # noqa: E731
        for n in sizes:
            ours, theirs = rates(world, null, n, runs, seed=n)
            bound = ALPHA + 2 * se(ALPHA, runs)
            print(f"{dim:>5} {n:>7} | {ours:>13.3f} {'yes' if ours <= bound else 'NO':>9} | {theirs:>17.3f}")


def power(sizes: list[int], dim: int, runs: int) -> None:
    world = World(dim)
    grades = {
        "mean shift (8-dim subspace)": [0.02, 0.05, 0.1],
        "new cluster (share)": [0.02, 0.05, 0.1],
        "mixture weight": [0.4, 0.3, 0.2],
    }
    print(f"\n## Power at {dim} dims ({runs} runs per cell): classifier_mw / model")
    print(f"{'shift':>28} {'size':>6} | " + " | ".join(f"{'n=' + str(n):>13}" for n in sizes))
    for name, make in shifts(world).items():
        for size in grades[name]:
            current = make(size)
            cells = []
            for n in sizes:
                ours, theirs = rates(world, current, n, runs, seed=10 * n + 1)
                cells.append(f"{ours:>5.2f} / {theirs:<5.2f}")
            print(f"{name:>28} {size:>6} | " + " | ".join(f"{c:>13}" for c in cells))


def _timed_check(n: int, method: str, queue: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    world = World(768)
    rng = np.random.default_rng(1)
    reference, current = World.normalise(world.sample(rng, n)), World.normalise(world.sample(rng, n))
    started = time.perf_counter()
    test = EMBEDDING_METHODS[method]
    test.score(reference, current, n)
    seconds = time.perf_counter() - started
    queue.put((seconds, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024))


def timing(sizes: list[int]) -> None:
    print("\n## One check, n vs n × 768 (each in a fresh process: peak RSS of that process)")
    print(f"{'n/side':>7} {'method':>14} {'seconds':>8} {'peak RSS MiB':>13}")
    context = multiprocessing.get_context("spawn")
    for n in sizes:
        for method in EMBEDDING_METHODS:
            queue = context.Queue()
            child = context.Process(target=_timed_check, args=(n, method, queue))
            child.start()
            seconds, rss = queue.get()
            child.join()
            print(f"{n:>7} {method:>14} {seconds:>8.2f} {rss:>13.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40, help="Monte-Carlo runs per cell")
    parser.add_argument("--sizes", default="100,200,500,1000", help="rows per side")
    parser.add_argument("--dims", default="384,768")
    parser.add_argument("--power-dim", type=int, default=384)
    parser.add_argument("--timing-sizes", default="5000,10000,20000")
    parser.add_argument("--skip-timing", action="store_true")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    false_alarms(sizes, [int(d) for d in args.dims.split(",")], args.runs)
    power(sizes, args.power_dim, args.runs)
    if not args.skip_timing:
        timing([int(s) for s in args.timing_sizes.split(",")])


if __name__ == "__main__":
    main()
