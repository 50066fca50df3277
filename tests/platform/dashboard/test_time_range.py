"""The model page's time range: presets end at the newest check, the URL keeps the choice, and
the chart sits on a time axis with markers for breaches and alerts."""

from datetime import datetime
from typing import Any

from django.test import Client

from tests.clock import at, minute

START, END = at(minutes=30), at(hours=1, minutes=30)


def field(when: datetime) -> str:
    """As an <input type="datetime-local"> holds it."""
    return f"{when:%Y-%m-%dT%H:%M}"


def test_last_hour_shows_only_the_newest_check(staff: Client, story: dict[str, Any]) -> None:
    page = staff.get("/models/sea/?range=1h").content.decode()
    table = page.split('<table class="grid checks">')[1].split("</table>")[0]
    assert f'href="/checks/{story["bad"].pk}/"' in table
    assert f'href="/checks/{story["good"].pk}/"' not in table
    assert 'class="range active" href="?range=1h"' in page


def test_last_day_shows_both_checks_on_the_chart(staff: Client, story: dict[str, Any]) -> None:
    page = staff.get("/models/sea/?range=24h").content.decode()
    assert page.count('<circle class="pt s-realised"') == 2


def test_a_custom_range_is_kept_in_the_form(staff: Client, story: dict[str, Any]) -> None:
    page = staff.get(f"/models/sea/?range=custom&start={field(START)}&end={field(END)}").content.decode()
    assert f'value="{field(START)}"' in page and f'value="{field(END)}"' in page
    assert f"showing {minute(START)} → {minute(END)} UTC" in page
    assert page.count('<circle class="pt s-realised"') == 1


def test_an_unreadable_range_falls_back_and_says_why(staff: Client, story: dict[str, Any]) -> None:
    page = staff.get("/models/sea/?range=custom&start=nope").content.decode()
    assert "custom range needs a start before its end: showing the last week." in page


def test_the_chart_marks_breaches_and_alerts(staff: Client, story: dict[str, Any]) -> None:
    page = staff.get("/models/sea/?range=all").content.decode()
    assert f'<g class="marker m-breach"><a href="/checks/{story["bad"].pk}/">' in page
    assert '<g class="marker m-alert">' in page
    assert '<text class="y-label"' in page and ">accuracy</text>" in page


def test_a_long_range_draws_at_most_chart_checks_points_and_keeps_the_newest(staff: Client, db: None) -> None:
    from datetime import timedelta

    from django.utils import timezone

    from dashboard.selectors import CHART_CHECKS
    from monitoring.models import QualityCheck
    from tests.platform.dashboard.conftest import T0
    from tests.platform.monitoring.factories import monitored_model

    model = monitored_model("long", reference_rows=300)
    n = CHART_CHECKS + 50
    QualityCheck.objects.bulk_create(
        QualityCheck(
            model=model,
            window_spec="1h",
            window_start=T0 + timedelta(hours=i - 1),
            window_end=T0 + timedelta(hours=i),
            state="done",
            started_at=timezone.now(),
            metrics={"accuracy": 0.9 if i < n - 1 else 0.5},
        )
        for i in range(n)
    )
    page = staff.get("/models/long/?range=all").content.decode()
    points = page.count('<circle class="pt s-realised"')
    assert CHART_CHECKS // 2 <= points <= CHART_CHECKS
    assert "accuracy 0.500" in page  # the newest check is drawn
