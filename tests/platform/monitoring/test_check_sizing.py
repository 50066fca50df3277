"""Whether a check asked for in a request runs there or on a worker (``check_runs_on_worker``):
in the columnar store a range window is sized by its hours' parts when their rows settle it (no
count of the index rows: 0.75 s at 10M), by one count query when they do not, and always the
same answer as the count."""

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from monitoring.checks import check_runs_on_worker
from monitoring.store.source import window_rows_bounds
from monitoring.window import WindowSpec, parse_window_spec, range_window, window_sample_count
from registry.models import RegisteredModel
from tests.clock import T0
from tests.platform.monitoring.factories import json_rows_send, monitored_model, rows, send

pytestmark = pytest.mark.django_db
HOUR = timedelta(hours=1)


def _counted(model: RegisteredModel, window: WindowSpec, limit: int, settings: Any) -> tuple[bool, bool]:
    """(runs on a worker, the index rows were counted to decide it)."""
    settings.DRIFTWATCH_SYNC_CHECK_SAMPLES = limit
    with CaptureQueriesContext(connection) as queries:
        queued = check_runs_on_worker(model=model, window=window)
    count = window_sample_count(model=model, start=window.start, end=window.end, last_n=window.last_n)
    assert queued == (count > limit)  # the same answer as the count, whichever way it came
    return queued, any("count(" in q["sql"].lower() for q in queries.captured_queries)


def test_a_range_is_sized_by_its_hours_parts_and_counted_only_when_they_do_not_settle_it(
    columnar: Path, settings: Any
) -> None:
    model = monitored_model("sea", reference_rows=100)
    send(model, rows(300, seed=2), start=T0 + timedelta(minutes=40), prefix="a")  # 40:00-44:59
    send(model, rows(200, seed=3), start=T0 + HOUR, prefix="b")  # the next hour
    send(model, rows(100, seed=4), start=T0 + HOUR + timedelta(minutes=10), prefix="c")
    whole, cut = range_window(T0, T0 + 2 * HOUR), range_window(T0 + timedelta(minutes=42), T0 + 2 * HOUR)
    assert window_rows_bounds(model, whole.start, whole.end) == (600, 600)
    assert window_rows_bounds(model, cut.start, cut.end) == (300, 600)  # the first hour is cut
    assert window_rows_bounds(model, None, T0 + HOUR + timedelta(minutes=5)) == (300, 600)
    assert _counted(model, whole, 599, settings) == (True, False)
    assert _counted(model, whole, 600, settings) == (False, False)
    assert _counted(model, cut, 299, settings) == (True, False)  # past the whole hour alone
    assert _counted(model, cut, 600, settings) == (False, False)  # within every hour it touches
    assert _counted(model, cut, 450, settings) == (True, True)  # 480 samples: counted
    assert _counted(model, cut, 480, settings) == (False, True)
    assert _counted(model, parse_window_spec("400samples", T0 + 2 * HOUR), 400, settings) == (False, False)
    assert _counted(model, parse_window_spec("401samples", T0 + 2 * HOUR), 400, settings) == (True, True)


def test_a_window_holding_samples_stored_as_json_rows_is_counted(columnar: Path, settings: Any) -> None:
    model = monitored_model("sea", reference_rows=100)
    json_rows_send(model, rows(120, seed=2), start=T0, prefix="old")  # no part
    send(model, rows(30, seed=3), start=T0 + HOUR, prefix="new")
    window = range_window(T0, T0 + 2 * HOUR)
    assert window_rows_bounds(model, window.start, window.end) is None
    assert _counted(model, window, 100, settings) == (True, True)
    assert _counted(model, window, 150, settings) == (False, True)
