"""Seeded generators of reference/current frames covering evidently's default-method branches."""

from __future__ import annotations

import numpy as np
import pandas as pd

from workers.drift.summary import ColumnType

Frames = tuple[pd.DataFrame, pd.DataFrame, dict[str, ColumnType]]


def _with_missing(rng: np.random.Generator, values: np.ndarray, share: float) -> np.ndarray:
    out = values.astype(object) if values.dtype.kind in "OUS" else values.astype("float64")
    out[rng.random(values.size) < share] = None if out.dtype == object else np.nan
    return out


def _numerical(rng: np.random.Generator, n: int, drift: bool) -> dict[str, np.ndarray]:
    shift = 0.4 if drift else 0.0
    return {
        "num_normal": rng.normal(shift, 1.0, n),
        "num_small_shift": rng.normal(0.08 if drift else 0.0, 1.0, n),
        "num_scale": rng.normal(0.0, 1.6 if drift else 1.0, n),
        "num_lognormal": rng.lognormal(0.3 if drift else 0.0, 1.0, n),
        "num_int_wide": rng.integers(0, 50 + (20 if drift else 0), n),
        "num_card3": rng.choice([0.0, 1.0, 2.0], n, p=[0.2, 0.3, 0.5] if drift else [0.3, 0.3, 0.4]),
        "num_card5": rng.integers(0, 5, n).astype("float64"),
        "num_card6": rng.integers(0, 6 if drift else 5, n),  # 5 in reference, 6 with drift
        "num_binary": rng.choice([0, 1], n, p=[0.4, 0.6] if drift else [0.5, 0.5]),
        "num_constant": np.full(n, 3.0 if drift else 2.0),
        "num_missing": _with_missing(rng, rng.normal(shift, 1.0, n), 0.2),
        "num_card4_missing": _with_missing(rng, rng.integers(0, 4, n).astype("float64"), 0.1),
    }


def _categorical(rng: np.random.Generator, n: int, drift: bool) -> dict[str, np.ndarray]:
    colours = ["red", "green", "blue", "black", "white"]
    p_colour = [0.3, 0.25, 0.2, 0.15, 0.1] if drift else [0.2] * 5
    cities = [f"city_{i}" for i in range(12 if drift else 10)]  # new categories with drift
    return {
        "cat_colour": rng.choice(colours, n, p=p_colour),
        "cat_city": rng.choice(cities, n),
        "cat_binary": rng.choice(["yes", "no"], n, p=[0.6, 0.4] if drift else [0.5, 0.5]),
        "cat_constant": np.full(n, "only"),
        "cat_missing": _with_missing(rng, rng.choice(colours[:3], n), 0.15),
        "cat_int": rng.choice([1, 2, 3, 7], n),
        "cat_bool": rng.choice([True, False], n, p=[0.3, 0.7] if drift else [0.5, 0.5]),
    }


def column_types(frame: pd.DataFrame) -> dict[str, ColumnType]:
    return {c: "numerical" if c.startswith("num_") else "categorical" for c in frame.columns}


def make_frames(seed: int, n_reference: int, n_current: int, drift: bool) -> Frames:
    """One reference/current pair with every column kind; ``drift`` shifts the current."""
    rng = np.random.default_rng(seed)
    reference = pd.DataFrame({**_numerical(rng, n_reference, False), **_categorical(rng, n_reference, False)})
    current = pd.DataFrame({**_numerical(rng, n_current, drift), **_categorical(rng, n_current, drift)})
    # A category seen only in the reference: the current lacks it entirely.
    current["cat_colour"] = (
        current["cat_colour"].replace("white", "black") if drift else current["cat_colour"]
    )
    return reference, current, column_types(reference)
