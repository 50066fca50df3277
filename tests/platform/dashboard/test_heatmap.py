"""Heat-map cells read a score's direction from its stored column, never from the test's name."""

from datetime import timedelta
from types import SimpleNamespace

from dashboard.heatmap import _cells_html, _drill_link, drift_cell, drift_ratio
from dashboard.timerange import TimeRange
from tests.clock import T0
from workers.drift.result import score_read


def test_a_p_value_column_is_further_past_its_threshold_the_smaller_it_is() -> None:
    column = score_read({"method": "ks", "score": 0.001, "threshold": 0.05, "higher_is_drift": False})
    assert drift_ratio(column) == 50.0


def test_the_direction_comes_from_the_column_not_from_the_method_name() -> None:
    # "ks" is a p-value test in the engine; the stored flag is what the dashboard follows.
    column = score_read({"method": "ks", "score": 0.2, "threshold": 0.1, "higher_is_drift": True})
    assert drift_ratio(column) == 2.0
    assert "score above threshold = drift" in drift_cell(column)["title"]


def test_a_p_value_cell_says_its_rule_and_a_missing_column_is_not_measured() -> None:
    cell = drift_cell(
        score_read(
            {"method_display": "K-S p_value", "score": 0.2, "threshold": 0.05, "higher_is_drift": False}
        )
    )
    assert "p-value below threshold = drift" in cell["title"] and cell["drifted"] is False
    assert drift_cell(None)["title"] == "not measured"


def test_a_rows_cells_link_to_the_drill_down_in_range_and_escape_what_the_model_named() -> None:
    """The cells' HTML is built in Python (not the template): every stored text is escaped, the
    feature is URL-encoded, and a custom range travels with the link."""
    start = T0.replace(minute=0, second=0, microsecond=0)
    link = _drill_link(SimpleNamespace(name="m<1>"), TimeRange("custom", start, start + timedelta(hours=3)))
    hostile = '<b>"x"&y</b>'
    cell = {
        **drift_cell(
            score_read({"method": "psi", "score": 0.5, "threshold": 0.1, "drifted": True, "note": hostile})
        ),
        "check": 7,
    }
    html = str(_cells_html({"name": hostile, "feature": "a b&c", "cells": [cell]}, link))
    assert "<b>" not in html and "&lt;b&gt;&quot;x&quot;&amp;y&lt;/b&gt;" in html
    assert f"?feature=a%20b%26c&amp;range=custom&amp;start={start:%Y-%m-%dT%H:%M}&amp;end=" in html
    assert "&amp;check=7#distribution" in html and 'class="cell drifted"' in html and "●</a>" in html
    multivariate = str(_cells_html({"name": "all", "is_multivariate": True, "cells": [cell]}, link))
    assert "<a " not in multivariate and multivariate.endswith(">●</td>")
