"""Benchmark: workers.drift.data_drift against evidently's DataDriftPreset on the same data.

    python bench/drift.py                     # every section
    python bench/drift.py --section speed     # one section

Sections are plain functions registered in SECTIONS; main() runs them in order.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

from workers.drift import DriftResult, ReferenceSummary, data_drift, summarize_reference  # noqa: E402
from workers.drift.evidently_adapter import evidently_data_drift  # noqa: E402
from workers.drift.summary import ColumnType  # noqa: E402

T = TypeVar("T")

N_NUMERICAL, N_CATEGORICAL = 12, 8
REPEAT = {"ours": 5, "evidently": 1}  # runs per timing (median); set from --repeat
DRIFTED_NUMERICAL, DRIFTED_CATEGORICAL = 4, 3  # the first k columns of each kind drift


def make_columns() -> dict[str, ColumnType]:
    numerical: dict[str, ColumnType] = {f"num_{i:02d}": "numerical" for i in range(N_NUMERICAL)}
    return numerical | {f"cat_{i:02d}": "categorical" for i in range(N_CATEGORICAL)}


def _numerical_column(rng: np.random.Generator, i: int, n: int, drift: bool) -> np.ndarray:
    shift = 0.3 if drift and i < DRIFTED_NUMERICAL else 0.0
    if i % 4 == 3:  # low-cardinality numeric (evidently treats <= 5 values as discrete)
        p = [0.4, 0.3, 0.2, 0.1] if shift else [0.25] * 4
        return rng.choice(np.arange(4.0), n, p=p)
    values = rng.normal(shift, 1.0 + i / 10, n)
    values[rng.random(n) < 0.02] = np.nan  # a few missing values, as in real feeds
    return values


def _categorical_column(rng: np.random.Generator, i: int, n: int, drift: bool) -> np.ndarray:
    k = 3 + 2 * i
    p = np.ones(k) / k
    if drift and i < DRIFTED_CATEGORICAL:
        p = np.linspace(2.0, 0.5, k)
        p /= p.sum()
    return rng.choice(np.array([f"v{j}" for j in range(k)], dtype=object), n, p=p)


def make_frame(seed: int, n: int, drift: bool) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    data = {f"num_{i:02d}": _numerical_column(rng, i, n, drift) for i in range(N_NUMERICAL)}
    data |= {f"cat_{i:02d}": _categorical_column(rng, i, n, drift) for i in range(N_CATEGORICAL)}
    return pd.DataFrame(data)


def _timed(fn: Callable[[], T], repeat: int = 1) -> tuple[float, T]:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def _decisions_identical(ours: DriftResult, theirs: dict[str, Any]) -> tuple[bool, list[str]]:
    diffs = [
        name
        for name, col in ours.columns.items()
        if col.drifted != theirs["columns"][name]["drifted"]
        or col.method_display != theirs["columns"][name]["method_display"]
    ]
    return not diffs and ours.dataset_drift == theirs["dataset_drift"], diffs


def bench_speed_vs_evidently(n_reference: int, n_current: int = 100_000) -> None:
    """One scheduled check (reference summary precomputed) vs evidently on the same frames."""
    columns = make_columns()
    reference, current = make_frame(1, n_reference, False), make_frame(2, n_current, True)
    t_summary, summary = _timed(lambda: summarize_reference(reference, columns))
    blob = summary.to_bytes()
    t_load, summary = _timed(lambda: ReferenceSummary.from_bytes(blob))
    t_ours, ours = _timed(lambda: data_drift(summary, current, columns), REPEAT["ours"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t_evidently, theirs = _timed(
            lambda: evidently_data_drift(reference, current, columns), REPEAT["evidently"]
        )
    same, diffs = _decisions_identical(ours, theirs)
    methods = sorted({c.method or "not tested" for c in ours.columns.values()})
    print(f"\n== {n_current:,}-row x {len(columns)}-feature window, {n_reference:,}-row reference ==")
    print(f"methods selected          : {', '.join(methods)}")
    print(
        f"reference summary build   : {t_summary:8.3f} s  (once per version; {len(blob) / 1e6:.1f} MB, load {t_load:.3f} s)"
    )
    print(f"driftwatch data_drift     : {t_ours:8.3f} s  (median of {REPEAT['ours']})")
    print(f"evidently DataDriftPreset : {t_evidently:8.3f} s")
    print(f"speed-up                  : {t_evidently / t_ours:8.1f} x  (target >= 20 x)")
    print(
        f"speed-up incl. summary    : {t_evidently / (t_ours + t_summary):8.1f} x  (summary built in the same call)"
    )
    print(
        f"drifted columns           : ours {ours.number_of_drifted_columns}, evidently {theirs['number_of_drifted_columns']:.0f}; share {ours.share:.2f}, dataset drift {ours.dataset_drift}"
    )
    print(f"identical decisions       : {same}" + (f"  differing: {diffs}" if diffs else ""))


def bench_million_rows(n_reference: int = 100_000, n_current: int = 1_000_000) -> None:
    """The drift computation alone over a 1,000,000-row window (target < 5 s)."""
    columns = make_columns()
    summary = summarize_reference(make_frame(1, n_reference, False), columns)
    current = make_frame(3, n_current, True)
    t_ours, ours = _timed(lambda: data_drift(summary, current, columns), REPEAT["ours"])
    print(f"\n== {n_current:,}-row x {len(columns)}-feature window, {n_reference:,}-row reference summary ==")
    print(
        f"driftwatch data_drift     : {t_ours:8.3f} s  (median of {REPEAT['ours']}; target < 5 s)  drifted share {ours.share:.2f}"
    )


def bench_postgres_check() -> None:
    """End-to-end scheduled check of a 100,000-sample window read from PostgreSQL (DATABASE_URL
    or the local default; uses its own `<db>_bench` database)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _drift_postgres import bench_postgres_check as run

    run(make_frame, make_columns())


SECTIONS: dict[str, Callable[[], None]] = {
    "speed-small-reference": lambda: bench_speed_vs_evidently(1_000),
    "speed-large-reference": lambda: bench_speed_vs_evidently(100_000),
    "million-rows": bench_million_rows,
    "postgres-check": bench_postgres_check,
}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--section", choices=sorted(SECTIONS), action="append", help="run only these sections"
    )
    parser.add_argument("--repeat", type=int, default=REPEAT["ours"], help="timed runs of our engine")
    parser.add_argument(
        "--evidently-repeat", type=int, default=REPEAT["evidently"], help="timed evidently runs"
    )
    args = parser.parse_args(argv)
    REPEAT.update(ours=args.repeat, evidently=args.evidently_repeat)
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} (timings are medians)")
    for name in args.section or list(SECTIONS):
        SECTIONS[name]()


if __name__ == "__main__":
    main()
