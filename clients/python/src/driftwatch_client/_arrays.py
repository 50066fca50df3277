"""Rows out of what scikit-learn and torch code holds: numpy arrays, pandas frames, tensors, lists.

Read by duck typing (`.columns`, `.tolist()`), so numpy, pandas and torch are never imported
here: a service that uses none of them loads none of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def is_frame(value: Any) -> bool:
    return hasattr(value, "columns") and hasattr(value, "iloc")


def to_list(value: Any) -> list[Any]:
    """numpy array / pandas Series / torch tensor (any device) / iterable → a Python list."""
    if hasattr(value, "detach"):  # a torch tensor: off the autograd graph first
        value = value.detach()
    if hasattr(value, "tolist"):
        out = value.tolist()
        return out if isinstance(out, list) else [out]
    return list(value)


def feature_rows(X: Any, feature_names: Sequence[str] | None) -> list[dict[str, Any]]:
    """One {feature: value} dict per row; a 2-D array needs its column names."""
    if is_frame(X):
        names = [str(c) for c in X.columns]
        columns = [X[c].tolist() for c in X.columns]
        return [dict(zip(names, values, strict=True)) for values in zip(*columns, strict=True)]
    rows = to_list(X)
    if all(isinstance(row, dict) for row in rows):
        return rows
    if not feature_names:
        raise ValueError("X has no column names: pass feature_names= (or Monitor(feature_names=…))")
    names = list(feature_names)
    out = []
    for row in rows:
        values = row if isinstance(row, list) else [row]
        if len(values) != len(names):
            raise ValueError(f"a row of X has {len(values)} values for {len(names)} feature names")
        out.append(dict(zip(names, values, strict=True)))
    return out


def _scalar(value: Any) -> Any:
    """[p] → p: an (n, 1) column of predictions is read as n predictions."""
    return value[0] if isinstance(value, list) and len(value) == 1 else value


def predictions(y_pred: Any) -> list[Any]:
    return [_scalar(v) for v in to_list(y_pred)]


def probability_rows(proba: Any, classes: Sequence[Any] | None) -> list[dict[str, float]]:
    """predict_proba's (n, k) array (columns in `classes` order), a frame, or a list of dicts."""
    if is_frame(proba):
        classes = [str(c) for c in proba.columns]
        proba = proba.to_numpy()
    rows = to_list(proba)
    if all(isinstance(row, dict) for row in rows):
        return rows
    if not classes:
        raise ValueError("proba is an array: pass classes= (e.g. model.classes_) to name its columns")
    names = [str(c) for c in to_list(classes)]
    out = []
    for row in rows:
        if not isinstance(row, list) or len(row) != len(names):
            raise ValueError(f"each proba row needs {len(names)} values, one per class {names}")
        out.append(dict(zip(names, row, strict=True)))
    return out
