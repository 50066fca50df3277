from datetime import UTC, datetime

import pytest

from dashboard.charts import HLine, Marker, Series, line_chart, nice_ticks, time_ticks
from tests.clock import T0, at


def test_a_missing_value_breaks_the_line_instead_of_bridging_it() -> None:
    chart = line_chart(times=[0, 3600, 7200, 10800], series=[Series("m", "s", [0.9, None, 0.8, 0.7])])
    path = chart["series"][0]["path"]
    assert path.count("M") == 2 and path.count("L") == 1
    assert len(chart["series"][0]["points"]) == 3


def test_a_lone_interval_is_an_error_bar_not_a_sliver_of_area() -> None:
    chart = line_chart(times=[0, 3600], series=[Series("m", "s", [0.9, 0.8], band=[(0.85, 0.95), None])])
    assert chart is not None
    assert chart["series"][0]["band"] == ""
    assert chart["series"][0]["whiskers"].count("M") == 3


def test_reference_lines_sit_inside_the_axis() -> None:
    chart = line_chart(
        times=[0],
        series=[Series("m", "s", [0.6])],
        hlines=[HLine("baseline", "h", 0.9)],
        clamp=(0.0, 1.0),
    )
    assert [h["value"] for h in chart["hlines"]] == ["0.90"]
    assert chart["top"] <= float(chart["hlines"][0]["y"]) <= chart["bottom"]


def test_ticks_are_round_numbers() -> None:
    assert nice_ticks(0.5, 1.0) == [0.5, 0.6, 0.7, 0.8, 0.9, 1.0]


def test_points_sit_at_their_times_not_at_their_index() -> None:
    chart = line_chart(times=[0, 3600, 36000], series=[Series("m", "s", [0.9, 0.8, 0.7])], x_range=(0, 36000))
    assert chart is not None
    xs = [float(p["x"]) for p in chart["series"][0]["points"]]
    assert (xs[1] - xs[0]) * 9 == pytest.approx(xs[2] - xs[1], abs=0.5)


def test_time_ticks_are_distinct_round_instants_with_their_year() -> None:
    ticks = time_ticks(int(T0.timestamp()), int(at(days=2).timestamp()))
    labels = [label for _, label in ticks]
    assert len(labels) == len(set(labels)) >= 3
    assert all(label.startswith(f"{datetime.fromtimestamp(t, UTC).year}-") for t, label in ticks)


def test_a_chart_with_nothing_to_draw_is_none_so_the_page_shows_an_empty_state() -> None:
    assert line_chart(times=[0, 3600], series=[Series("m", "s", [None, None])]) is None


def test_the_y_axis_is_labelled_and_markers_outside_the_range_are_dropped() -> None:
    markers = [Marker(1800, "alert", "inside"), Marker(99999, "retrain", "outside")]
    chart = line_chart(
        times=[0, 3600],
        series=[Series("m", "s", [0.9, 0.8])],
        y_label="accuracy",
        x_range=(0, 3600),
        markers=markers,
    )
    assert chart is not None and chart["y_label"] == "accuracy"
    assert [m["title"] for m in chart["markers"]] == ["inside"] and chart["marker_kinds"] == ["alert"]
