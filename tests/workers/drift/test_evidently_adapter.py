"""The evidently HTML report for a stored check."""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pytest

from tests.clock import T0
from tests.workers.drift.factories import make_frames
from workers.drift.evidently_adapter import ReportColumns, render_check_report_html, render_drift_report_html


def test_html_report_names_every_column() -> None:
    reference, current, columns = make_frames(12, 300, 300, True)
    columns = {
        name: kind for name, kind in columns.items() if name in ("num_normal", "cat_colour", "num_binary")
    }
    html = render_drift_report_html(reference, current, columns)
    assert html.lstrip().lower().startswith("<html") or "<html" in html[:500].lower()
    for name in columns:
        assert name in html


PAYLOAD = "</script><script>alert(document.cookie)</script><!--"


def _hostile_frames() -> tuple[pd.DataFrame, pd.DataFrame]:
    rng = np.random.default_rng(3)
    reference = pd.DataFrame({"x": rng.normal(0, 1, 200), "seg": rng.choice(["a", "b"], 200)})
    current = pd.DataFrame({"x": rng.normal(1, 1, 200), "seg": rng.choice(["a", PAYLOAD], 200)})
    reference[PAYLOAD + "col"] = rng.normal(0, 1, 200)
    current[PAYLOAD + "col"] = rng.normal(0, 1, 200)
    return reference, current


def test_html_report_embeds_hostile_values_so_they_cannot_end_its_script_element() -> None:
    reference, current = _hostile_frames()
    columns = {"x": "numerical", "seg": "categorical", PAYLOAD + "col": "numerical"}
    html = render_drift_report_html(reference, current, columns)  # type: ignore[arg-type]
    assert "</script><script>alert" not in html
    assert "<!--" not in html
    # The values are all still in the report's data, only escaped for the <script> element.
    data = re.search(r"var (metric_\w+) = (\{.*?\});\n", html, re.S)
    assert data is not None
    assert PAYLOAD in json.dumps(json.loads(data.group(2)), ensure_ascii=False)


def _counters(html: str) -> dict[str, str]:
    data = re.search(r"var metric_\w+ = (\{.*?\});\n", html, re.S)
    assert data is not None
    found: dict[str, str] = {}

    def walk(widget: dict[str, object]) -> None:
        params = widget.get("params") or {}
        for counter in params.get("counters") or [] if isinstance(params, dict) else []:
            found.setdefault(counter["label"], counter["value"])  # the first: current before reference
            if widget.get("title"):
                found[f"{widget['title']} / {counter['label']}"] = counter["value"]
        for child in widget.get("widgets") or []:  # type: ignore[attr-defined]
            walk(child)

    for widget in json.loads(data.group(1))["widgets"]:
        walk(widget)
    return found


def _multiclass(n: int, rng: np.random.Generator, shift: float) -> pd.DataFrame:
    x = rng.normal(shift, 1, n)
    truth = rng.choice(["cat", "dog", "fox"], n)
    predicted = np.where(rng.random(n) < 0.7, truth, rng.choice(["cat", "dog", "fox"], n))
    proba = rng.dirichlet([1, 1, 1], n)
    proba = np.sort(proba, axis=1)[:, ::-1]  # the predicted class is the most probable one
    order = {"cat": [0, 1, 2], "dog": [1, 0, 2], "fox": [1, 2, 0]}
    proba = np.stack([row[order[p]] for row, p in zip(proba, predicted, strict=True)])
    frame = pd.DataFrame({"x": x, "__prediction__": predicted, "__label__": truth})
    for i, cls in enumerate(("cat", "dog", "fox")):
        frame[f"__proba__:{cls}"] = proba[:, i]
    frame["timestamp"] = pd.Timestamp(T0)
    return frame


def test_a_multiclass_report_tests_only_features_and_shows_the_accuracy_of_its_labelled_rows() -> None:
    rng = np.random.default_rng(5)
    reference, current = _multiclass(400, rng, 0.0), _multiclass(300, rng, 2.0)
    current.loc[:99, "__label__"] = None  # a third of the window waits for its labels
    columns = ReportColumns(
        features={"x": "numerical"},
        prediction="__prediction__",
        target="__label__",
        task="classification",
        classes=("cat", "dog", "fox"),
        probabilities=("__proba__:cat", "__proba__:dog", "__proba__:fox"),
    )
    counters = _counters(render_check_report_html(reference, current, columns))
    labelled = current.iloc[100:]
    assert (counters["Columns"], counters["Drifted Columns"]) == ("1", "1")
    assert "Classification quality on the 200 labelled of 300 predictions (and on the reference)" in counters
    accuracy = float((labelled["__label__"] == labelled["__prediction__"]).mean())
    assert float(counters["Current: Model Quality Metrics / Accuracy"]) == pytest.approx(accuracy, abs=5e-4)
    reference_accuracy = float((reference["__label__"] == reference["__prediction__"]).mean())
    assert float(counters["Reference: Model Quality Metrics / Accuracy"]) == pytest.approx(
        reference_accuracy, abs=5e-4
    )
    assert "Log Loss" in counters or any("LogLoss" in k or "Log loss" in k for k in counters)
    current["__proba__:cat"], current["__proba__:fox"] = current["__proba__:fox"], current["__proba__:cat"]
    disagreeing = _counters(render_check_report_html(reference, current, columns))
    assert float(disagreeing["Current: Model Quality Metrics / Accuracy"]) == pytest.approx(
        accuracy, abs=5e-4
    )  # still the logged labels


def test_integer_classes_read_back_as_floats_are_the_same_classes() -> None:
    """A reference whose prediction column has a gap is float64 in parquet: 1.0 is class 1."""
    rng = np.random.default_rng(7)
    reference = pd.DataFrame({"x": rng.normal(0, 1, 300), "__prediction__": rng.choice([0.0, 1.0], 300)})
    reference.loc[0, "__prediction__"] = None
    current = pd.DataFrame(
        {"x": rng.normal(0, 1, 300), "__prediction__": rng.choice([0, 1], 300).astype(object)}
    )
    current["__label__"] = None
    columns = ReportColumns(
        features={"x": "numerical"},
        prediction="__prediction__",
        target="__label__",
        task="classification",
        classes=(0, 1),
    )
    counters = _counters(render_check_report_html(reference, current, columns))
    verdict = next(label for label, value in counters.items() if "column 'prediction'" in value)
    assert "not detected" in verdict
    assert "No classification quality: none of the 300 predictions has its label yet" in counters
