from dashboard.charts import HLine, Series, line_chart, nice_ticks


def test_a_missing_value_breaks_the_line_instead_of_bridging_it() -> None:
    chart = line_chart(x_labels=["a", "b", "c", "d"], series=[Series("m", "s", [0.9, None, 0.8, 0.7])])
    path = chart["series"][0]["path"]
    assert path.count("M") == 2 and path.count("L") == 1
    assert len(chart["series"][0]["points"]) == 3


def test_a_lone_interval_still_draws_a_band() -> None:
    chart = line_chart(x_labels=["a", "b"], series=[Series("m", "s", [0.9, 0.8], band=[(0.85, 0.95), None])])
    assert chart["series"][0]["band"].startswith("M") and chart["series"][0]["band"].endswith("Z")


def test_reference_lines_sit_inside_the_axis() -> None:
    chart = line_chart(
        x_labels=["a"],
        series=[Series("m", "s", [0.6])],
        hlines=[HLine("baseline", "h", 0.9)],
        clamp=(0.0, 1.0),
    )
    assert [h["value"] for h in chart["hlines"]] == ["0.90"]
    assert chart["top"] <= float(chart["hlines"][0]["y"]) <= chart["bottom"]


def test_ticks_are_round_numbers() -> None:
    assert nice_ticks(0.5, 1.0) == [0.5, 0.6, 0.7, 0.8, 0.9, 1.0]
