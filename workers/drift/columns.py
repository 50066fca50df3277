"""The window a drift function reads, in any columnar form: a pandas DataFrame, a mapping of
column name to a 1-d array (numpy, or anything ``pd.Series`` takes), or a pyarrow Table.

The engines read one column at a time as a ``pd.Series`` (no copy for a numpy array), so a
sample source that hands over arrays never has to build a DataFrame first.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeAlias

import pandas as pd

if TYPE_CHECKING:
    import pyarrow as pa

Columns: TypeAlias = "pd.DataFrame | Mapping[str, Any] | pa.Table"


def _is_arrow(data: Any) -> bool:
    # Checked by name: pyarrow is imported only by those who hand over a Table.
    return type(data).__module__.startswith("pyarrow") and hasattr(data, "column_names")


def column_names(data: Columns) -> list[str]:
    if isinstance(data, pd.DataFrame):
        return list(data.columns)
    if _is_arrow(data):
        return list(data.column_names)  # type: ignore[union-attr]
    return list(data)  # type: ignore[arg-type]


def column_values(data: Columns, name: str) -> pd.Series:
    """One column as a Series (the DataFrame's own, or a no-copy wrap of the array)."""
    if isinstance(data, pd.DataFrame):
        return data[name]
    if _is_arrow(data):
        return data.column(name).to_pandas()  # type: ignore[union-attr]
    values = data[name]  # type: ignore[index]
    return values if isinstance(values, pd.Series) else pd.Series(values, copy=False)


def n_rows(data: Columns) -> int:
    if isinstance(data, pd.DataFrame):
        return int(len(data))
    if _is_arrow(data):
        return int(data.num_rows)  # type: ignore[union-attr]
    names = column_names(data)
    return int(len(data[names[0]])) if names else 0  # type: ignore[index]


def as_frame(data: Columns, names: list[str] | None = None) -> pd.DataFrame:
    """A DataFrame of (some of) the columns, for the engines that need a matrix (PCA, DLE)."""
    if isinstance(data, pd.DataFrame):
        return data if names is None else data[names]
    names = column_names(data) if names is None else names
    return pd.DataFrame({name: column_values(data, name) for name in names})
