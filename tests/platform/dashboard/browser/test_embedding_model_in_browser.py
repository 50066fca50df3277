"""The demo's ticket router (an embedding and a text feature) in headless Chromium, at desktop and
phone widths: its model page, the embedding's drill-down (score over time, the first-component
bars, the two-component scatter) and the text's, without console errors or overflow."""

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User

from demo.services import demo_tickets_ensure
from monitoring.models import MonitoringPolicy
from monitoring.services import labels_ingest, predictions_ingest
from registry.models import RegisteredModel
from tests.clock import T0
from tests.platform.dashboard.browser.conftest import Tab
from tests.platform.dashboard.browser.test_pages_in_browser import PASSWORD, _check
from workers.demo import TICKETS_MODEL, frame_rows, tickets_frame


def _send(model: RegisteredModel, *, drift: float, seed: int, hour: int) -> None:
    frame, labels, predicted = tickets_frame(300, drift=drift, seed=seed)
    start = T0 + timedelta(hours=hour)
    samples = [
        {
            "id": f"h{hour}-{i}",
            "timestamp": (start + i * timedelta(seconds=1)).isoformat(),
            "features": f,
            "prediction": p,
        }
        for i, (f, p) in enumerate(zip(frame_rows(frame), predicted, strict=True))
    ]
    predictions_ingest(model=model, body={"samples": samples})
    labels_ingest(
        model=model, body={"labels": [{"id": f"h{hour}-{i}", "label": y} for i, y in enumerate(labels)]}
    )


@pytest.fixture
def tickets(transactional_db: None) -> dict[str, Any]:
    User.objects.create_user("ops", password=PASSWORD, is_staff=True)
    demo_tickets_ensure()
    model = RegisteredModel.objects.get(name=TICKETS_MODEL)
    MonitoringPolicy.objects.filter(model=model).update(window_size=300)  # one hour's batch per check
    _send(model, drift=0.0, seed=11, hour=0)
    good = _check(model, T0 + timedelta(hours=1))
    _send(model, drift=0.8, seed=12, hour=1)
    bad = _check(model, T0 + timedelta(hours=2))
    return {"model": model, "good": good, "bad": bad}


def test_the_ticket_routers_page_and_its_embedding_and_text_drill_downs(
    tab_for: Callable[[str, str], Tab], tickets: dict[str, Any]
) -> None:
    tab = tab_for("ops", PASSWORD)
    page = tab.visit(f"/models/{TICKETS_MODEL}/", "model")
    bad = tickets["bad"].pk
    assert (
        page.locator(f'table.heatmap a[href*="feature=ticket_embedding"][href*="check={bad}"]').count() == 1
    )
    page.locator(f'table.heatmap a[href*="feature=ticket_embedding"][href*="check={bad}"]').click()
    tab.settle("ticket-embedding")
    assert page.locator("figure.chart circle.pt.s-realised").count() == 2  # the score of both checks
    assert page.locator("figure.histogram rect.bar-cur").count() >= 10
    assert page.locator("figure.scatter circle.dot-ref").count() == 300
    assert page.locator("figure.scatter circle.dot-cur").count() == 300
    assert page.locator("table.effects .badge.bad").count() == 1  # the drifted check's decision
    tab.visit(f"/models/{TICKETS_MODEL}/drift/?feature=ticket_text&range=all&check={bad}", "ticket-text")
    assert page.locator("figure.chart circle.pt.s-realised").count() == 2
