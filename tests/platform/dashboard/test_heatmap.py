"""Heat-map cells read a score's direction from its stored column, never from the test's name."""

from dashboard.heatmap import drift_cell, drift_ratio
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
