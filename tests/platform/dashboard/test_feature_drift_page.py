"""A heat-map cell opens that feature's drift: its score per check over time, and reference vs
the check's window with the effect size, read from check rows (never the samples)."""

import re
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from monitoring.models import CheckDistribution, PredictionSample
from registry.reference import PREDICTION
from tests.clock import T0
from tests.platform.dashboard.conftest import run_check
from tests.platform.monitoring.factories import monitored_model, rows, send
from workers.drift import sorts

pytestmark = pytest.mark.django_db


def _page(client: Client, query: str) -> str:
    response = client.get(f"/models/sea/drift/?{query}")
    assert response.status_code == 200, response.content[:300]
    return response.content.decode()


def test_each_heat_map_cell_links_to_its_feature_at_its_check(staff: Client, story: dict[str, Any]) -> None:
    page = staff.get("/models/sea/").content.decode()
    bad = story["bad"].pk
    assert "/models/sea/drift/?feature=x1&amp;range=" in page
    assert re.search(
        rf'href="/models/sea/drift/\?feature=segment&amp;range=[^"]*&amp;check={bad}#distribution"', page
    )
    assert re.search(rf'href="/models/sea/drift/\?feature=prediction&amp;range=[^"]*&amp;check={bad}#', page)


def test_the_score_series_has_one_point_per_check_and_the_threshold(
    staff: Client, story: dict[str, Any]
) -> None:
    page = _page(staff, "feature=x1&range=all")
    assert page.count('class="pt s-realised"') == 2
    threshold = story["bad"].drift["columns"]["x1"]["threshold"]
    assert f"threshold {threshold:.3g}" in page
    assert 'class="marker m-breach"' in page  # the drifted check is marked, and links to it


def test_a_numerical_feature_shows_reference_vs_window_bars_and_its_effect_sizes(
    staff: Client, story: dict[str, Any]
) -> None:
    bad = story["bad"]
    page = _page(staff, f"feature=x1&range=all&check={bad.pk}")
    stored = CheckDistribution.objects.get(quality_check=bad, column="x1").payload
    bins = len(stored["labels"])
    assert page.count('class="bar-ref"') == bins and page.count('class="bar-cur"') == bins
    assert f"{stored['psi']:.4f}" in page and f"{stored['wasserstein_norm']:.4f}" in page
    assert "Cramér" not in page and f"check #{bad.pk}" in page


def test_a_categorical_feature_shows_category_frequencies_and_cramers_v(
    staff: Client, story: dict[str, Any]
) -> None:
    bad = story["bad"]
    page = _page(staff, f"feature=segment&check={bad.pk}&range=all")
    stored = CheckDistribution.objects.get(quality_check=bad, column="segment").payload
    assert page.count('class="bar-cur"') == 3 and f"{stored['cramers_v']:.4f}" in page


def test_the_prediction_row_opens_the_prediction_drift(staff: Client, story: dict[str, Any]) -> None:
    bad = story["bad"]
    page = _page(staff, f"feature=prediction&check={bad.pk}&range=all")
    stored = CheckDistribution.objects.get(quality_check=bad, column=PREDICTION).payload
    assert page.count('class="bar-ref"') == len(stored["labels"])
    assert f"{bad.prediction_drift['score']:.4f}" in page


def test_the_newest_check_is_shown_when_none_is_asked_for(staff: Client, story: dict[str, Any]) -> None:
    page = _page(staff, "feature=x2&range=all")
    assert f"check #{story['bad'].pk}," in page


def test_the_page_reads_check_rows_never_the_samples(staff: Client, story: dict[str, Any]) -> None:
    samples = PredictionSample._meta.db_table
    with CaptureQueriesContext(connection) as queries:
        _page(staff, f"feature=x1&check={story['bad'].pk}&range=all")
    assert not [q["sql"] for q in queries.captured_queries if samples in q["sql"]]


def test_an_unknown_feature_is_a_404_and_a_malformed_check_a_400_naming_it(
    staff: Client, story: dict[str, Any]
) -> None:
    assert staff.get("/models/sea/drift/?feature=nope").status_code == 404
    response = staff.get("/models/sea/drift/?feature=x1&check=abc")
    assert response.status_code == 400 and b"check" in response.content


def test_another_models_check_is_a_404(staff: Client, story: dict[str, Any]) -> None:
    other = monitored_model("other", reference_rows=300, window_size=200, min_samples=100, min_labels=100)
    check = run_check(other, story["bad"].window_end)
    assert staff.get(f"/models/sea/drift/?feature=x1&check={check.pk}").status_code == 404


def test_a_check_without_a_stored_distribution_says_so(staff: Client, story: dict[str, Any]) -> None:
    CheckDistribution.objects.filter(quality_check=story["good"]).delete()  # an older check
    page = _page(staff, f"feature=x1&check={story['good'].pk}&range=all")
    assert "stored no distribution for x1" in page and 'class="bar-ref"' not in page


def test_checks_scored_by_another_test_are_not_drawn_on_the_same_axis(
    staff: Client, story: dict[str, Any]
) -> None:
    good = story["good"]
    drift = good.drift
    drift["columns"]["x1"].update(method="wasserstein", method_display="Wasserstein distance (normed)")
    type(good).objects.filter(pk=good.pk).update(drift=drift)
    page = _page(staff, "feature=x1&range=all")
    assert page.count('class="pt s-realised"') == 1 and "1 check in this range used another test" in page


def test_a_window_past_the_sample_size_says_its_distance_and_bars_are_a_samples(
    staff: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real check of a window larger than SAMPLE_ABOVE (lowered here to 300 values): the
    stored column names the sample and its stated error, the check page's note says it, the
    drill-down keeps the window's own count and says its bars are a sample's; the multivariate
    error's mean is a sample's, said on the check page."""
    monkeypatch.setattr(sorts, "SAMPLE_ABOVE", 300)
    monkeypatch.setattr(sorts, "SAMPLE_SIZE", 200)
    model = monitored_model("sea", reference_rows=1500, window_size=400, min_samples=100, min_labels=100)
    send(model, rows(400, seed=3, shift=0.3), start=T0, prefix="w")
    check = run_check(model, T0 + timedelta(hours=1))
    column = check.drift["columns"]["x1"]
    assert column["method"] == "wasserstein" and column["n_current"] == 400
    assert column["sample"]["rows"] == 200 and column["sample"]["of"] == 400 and column["sample"]["error"] > 0
    assert "200 of the window's 400 values" in column["note"]
    assert check.drift["columns"]["segment"].get("sample") is None  # counted tests read every value
    stored = CheckDistribution.objects.get(quality_check=check, column="x1").payload
    assert stored["sample"] == column["sample"] and stored["n_current"] == 400
    assert stored["wasserstein_norm"] == column["score"]
    page = _page(staff, f"feature=x1&range=all&check={check.pk}")
    assert "window&#x27;s bars from a uniform sample of 200 of its 400 values" in page
    detail = staff.get(f"/checks/{check.pk}/").content.decode()
    assert "200 of the window&#x27;s 400 values" in detail
    multivariate = check.drift["multivariate"]  # the PCA error's mean: a sample of the rows too
    assert multivariate["sample"]["rows"] == 200 and multivariate["sample"]["of"] == 400
    assert "a uniform sample of 200 of the window's 400 rows" in detail  # the template's own text
