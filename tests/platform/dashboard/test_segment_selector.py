"""The model page's segment selector and per-segment heat map, rendered without a browser."""

import html
import re
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client

from monitoring.models import QualityCheck
from monitoring.segment_rules import segment_entries
from tests.platform.dashboard.conftest import T0, run_check
from tests.platform.monitoring.factories import monitored_model, rows, send


@pytest.fixture
def segmented(db: None) -> QualityCheck:
    """A window whose inputs shift only in segment "a" (x1 moves by 2 there)."""
    model = monitored_model(
        "sea",
        reference_rows=1000,
        window_size=600,
        min_samples=100,
        min_labels=100,
        segments=[{"feature": "segment"}, {"feature": "x2", "bins": [2.0]}],
        drift_share=0.3,  # x1 alone is a third of segment a's features (segment is constant there)
    )
    data = rows(600, seed=4)
    for r in data:
        if r["features"]["segment"] == "a":
            r["features"]["x1"] += 2.0
    send(model, data, start=T0, prefix="s")
    return run_check(model, T0 + timedelta(hours=1))


def heatmap_cells(page: str, feature: str) -> list[str]:
    """The heat map row's cells for one feature: 'drifted' or ''."""
    row = re.search(rf'<th class="feat">{feature}</th>(.*?)</tr>', page, re.S)
    assert row is not None, f"no heat-map row for {feature}"
    return ["drifted" if "drifted" in c else "" for c in re.findall(r'<td class="cell[^"]*"', row.group(1))]


def test_the_selector_offers_each_segment_and_the_whole_model(staff: Client, segmented: QualityCheck) -> None:
    page = staff.get("/models/sea/").content.decode()
    options = [
        html.unescape(o)
        for o in re.findall(r'<option value="([^"]*)"', page.split('id="segment"')[1].split("</select>")[0])
    ]
    assert options == ["", "segment=a", "segment=b", "segment=c", "x2=<2", "x2=>=2"]
    assert "Drift heat map</h2>" in page  # the whole model by default


def test_choosing_a_segment_draws_its_heat_map(staff: Client, segmented: QualityCheck) -> None:
    entries = segment_entries(segmented.segments)
    assert entries["segment=a"]["drift"]["columns"]["x1"]["drifted"] is True
    assert entries["segment=b"]["drift"]["columns"]["x1"]["drifted"] is False
    in_a = staff.get("/models/sea/", {"segment": "segment=a"}).content.decode()
    in_b = staff.get("/models/sea/", {"segment": "segment=b"}).content.decode()
    assert "Drift heat map · segment=a</h2>" in in_a
    assert '<option value="segment=a" selected>' in in_a
    assert heatmap_cells(in_a, "x1") == ["drifted"]
    assert heatmap_cells(in_b, "x1") == [""]


def test_a_small_segment_shows_why_it_decided_nothing(staff: Client, segmented: QualityCheck) -> None:
    page = staff.get("/models/sea/").content.decode()
    small = segment_entries(segmented.segments)["x2=>=2"]
    assert small["n_samples"] < 100
    assert "too small for a decision" in page


def test_an_unknown_segment_falls_back_to_the_whole_model(staff: Client, segmented: QualityCheck) -> None:
    response = staff.get("/models/sea/", {"segment": "<b>nope</b>"})
    page = response.content.decode()
    assert response.status_code == 200
    assert "Drift heat map</h2>" in page
    assert "<b>nope</b>" not in page and "&lt;b&gt;nope&lt;/b&gt;" in page


def test_a_model_without_segments_has_no_selector(staff: Client, story: dict[str, Any]) -> None:
    assert 'id="segment"' not in staff.get("/models/sea/").content.decode()


def test_a_segment_alert_names_its_segment_in_the_alert_list(staff: Client, segmented: QualityCheck) -> None:
    from monitoring.models import Alert

    alert = Alert.objects.exclude(segment="").filter(segment="segment=a").first()
    assert alert is not None
    page = staff.get("/alerts/").content.decode()
    assert f'<tr id="alert-{alert.pk}"' in page
    assert '<small class="muted alert-segment">segment=a</small>' in page
