"""Reference summaries stored before feature types were a registry still load: the format is
unchanged for the built-in types (``num:<name>`` arrays, per-type metadata)."""

import io
import json

import numpy as np
import pandas as pd

from workers.drift import ReferenceSummary, data_drift, summarize_reference


def _format_1_blob(values: np.ndarray, counts: list[list[object]]) -> bytes:
    """A summary as the first format wrote it, by hand."""
    ordered = np.sort(values)
    meta = {
        "version": 1,
        "n_rows": int(values.size),
        "columns": {"x": "numerical", "c": "categorical"},
        "numerical": {"x": {"std": float(np.std(ordered)), "n_unique": int(np.unique(ordered).size)}},
        "categorical": {"c": counts},
    }
    buffer = io.BytesIO()
    np.savez(buffer, **{"num:x": ordered, "__meta__": np.array(json.dumps(meta))})
    return buffer.getvalue()


def test_a_summary_stored_in_the_first_format_loads_and_checks_as_a_fresh_one() -> None:
    rng = np.random.default_rng(3)
    reference = pd.DataFrame({"x": rng.normal(size=2000), "c": rng.choice(["a", "b"], 2000)})
    counts = [[k, int(v)] for k, v in reference["c"].value_counts(sort=False).items()]
    stored = ReferenceSummary.from_bytes(_format_1_blob(reference["x"].to_numpy(), counts))
    columns = {"x": "numerical", "c": "categorical"}
    current = pd.DataFrame({"x": rng.normal(0.3, size=500), "c": rng.choice(["a", "b"], 500, p=[0.7, 0.3])})
    fresh = summarize_reference(reference, columns)
    assert data_drift(stored, current, columns).to_dict() == data_drift(fresh, current, columns).to_dict()


def test_a_fresh_summary_is_written_in_the_first_format() -> None:
    reference = pd.DataFrame({"x": [1.0, 2.0, 2.0], "c": ["a", "b", "a"]})
    blob = summarize_reference(reference, {"x": "numerical", "c": "categorical"}).to_bytes()
    with np.load(io.BytesIO(blob), allow_pickle=False) as data:
        meta = json.loads(str(data["__meta__"]))
        assert sorted(data.files) == ["__meta__", "num:x"]
        assert data["num:x"].tolist() == [1.0, 2.0, 2.0]
    assert meta["numerical"] == {"x": {"std": np.std([1.0, 2.0, 2.0]), "n_unique": 2}}
    assert meta["categorical"] == {"c": [["a", 2], ["b", 1]]}
