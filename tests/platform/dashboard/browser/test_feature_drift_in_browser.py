"""Clicking a heat-map cell in headless Chromium opens that feature's drift page: its score series
and the reference vs window bars draw, at desktop and phone widths, without errors."""

from collections.abc import Callable
from typing import Any

from tests.platform.dashboard.browser.conftest import Tab
from tests.platform.dashboard.browser.test_pages_in_browser import PASSWORD, story  # noqa: F401 (fixture)


def test_clicking_a_heat_map_cell_opens_the_features_drift(
    tab_for: Callable[[str, str], Tab],
    story: dict[str, Any],  # noqa: F811 (the imported fixture)
) -> None:
    tab = tab_for("ops", PASSWORD)
    page = tab.visit("/models/sea/", "model")
    page.locator(f'table.heatmap a[href*="feature=x1"][href*="check={story["bad"].pk}"]').click()
    tab.settle("feature-drift-x1")
    assert "/models/sea/drift/" in page.url
    assert page.locator("figure.chart circle.pt.s-realised").count() == 2
    assert page.locator("figure.histogram rect.bar-cur").count() >= 10
    assert page.locator("table.effects tr.effect-psi").count() == 1
    page.get_by_role("link", name="distribution").first.click()
    tab.settle("feature-drift-x1-newest")
