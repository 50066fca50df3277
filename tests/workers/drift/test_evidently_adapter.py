"""The evidently HTML report for a stored check."""

from __future__ import annotations

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
