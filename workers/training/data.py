"""Training frames: time order and the holdout (the most recent labelled slice)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd


@dataclass
class Split:
    train: pd.DataFrame
    train_labels: list[Any]
    holdout: pd.DataFrame
    holdout_labels: list[Any]


def time_ordered_split(
    frame: pd.DataFrame, labels: list[Any], *, time_column: str, holdout_fraction: float
) -> Split:
    """Sort by time (stable); the last ``holdout_fraction`` of rows is the holdout. Rows are never
    shuffled across the cut, so the holdout is strictly the newest data."""
    if not 0 < holdout_fraction < 1:
        raise ValueError("holdout_fraction must be in (0, 1)")
    order = frame[time_column].argsort(kind="stable").to_numpy()
    ordered = frame.iloc[order].reset_index(drop=True)
    ordered_labels = [labels[i] for i in order]
    cut = len(ordered) - max(1, int(round(len(ordered) * holdout_fraction)))
    return Split(
        train=ordered.iloc[:cut].reset_index(drop=True),
        train_labels=ordered_labels[:cut],
        holdout=ordered.iloc[cut:].reset_index(drop=True),
        holdout_labels=ordered_labels[cut:],
    )
