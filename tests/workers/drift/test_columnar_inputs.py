"""The drift engine reads a window as a DataFrame, a mapping of numpy arrays or a pyarrow Table,
with the same result from each (a sample source need not build a DataFrame)."""

from typing import Any

import pyarrow as pa
import pytest

from tests.workers.drift.factories import make_frames
from workers.drift import data_drift, data_quality, summarize_reference


def _forms(frame: Any) -> dict[str, Any]:
    arrays = {name: frame[name].to_numpy() for name in frame.columns}
    return {"arrays": arrays, "arrow": pa.Table.from_pandas(frame, preserve_index=False)}


@pytest.mark.parametrize("form", ["arrays", "arrow"])
def test_data_drift_on_columns_equals_data_drift_on_the_dataframe(form: str) -> None:
    reference, current, columns = make_frames(5, 3000, 800, drift=True)
    # pyarrow cannot hold a column of mixed ints and strings; every other kind it holds as is.
    columns = {n: t for n, t in columns.items() if n != "cat_int"} if form == "arrow" else columns
    current = current[list(columns)]
    summary = summarize_reference(reference, columns)
    expected = data_drift(summary, current, columns).to_dict()
    assert data_drift(summary, _forms(current)[form], columns).to_dict() == expected
    assert expected["number_of_drifted_columns"] > 0


def test_data_quality_on_arrays_equals_data_quality_on_the_dataframe() -> None:
    reference, current, columns = make_frames(6, 2000, 500, drift=True)
    categories = summarize_reference(reference, columns).categories()
    expected = data_quality(current, columns, categories=categories)
    assert data_quality(_forms(current)["arrays"], columns, categories=categories) == expected
    assert expected["n_rows"] == 500
