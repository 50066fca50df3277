"""The evidently HTML report for a stored check."""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd

from tests.workers.drift.factories import make_frames
from workers.drift.evidently_adapter import render_drift_report_html


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
