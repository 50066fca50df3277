"""A window's label count (what decides whether a finished check's realised side is refreshed):
a time range counts its labels by their predictions' timestamps, the last N by joining; both
equal the labelled rows of the window as it is loaded, whatever order labels and predictions
came in."""

from datetime import timedelta

import pytest

from monitoring.services import labels_ingest
from monitoring.window import window_label_count, window_load
from registry.reference import LABEL
from tests.clock import T0
from tests.platform.monitoring.factories import monitored_model, rows, send


def loaded_labels(model: object, **window: object) -> int:
    frame = window_load(model=model, **window).frame  # type: ignore[arg-type]
    return int(frame[LABEL].notna().sum())


@pytest.mark.django_db(transaction=True)
def test_the_count_equals_the_loaded_windows_labelled_rows() -> None:
    model = monitored_model()
    data = rows(60, seed=3)
    # Labels first for "early" (they wait for their predictions), predictions after; "on" in order;
    # "out" after the window; "none" never labelled; one "on" label sent twice.
    labels_ingest(
        model=model, body={"labels": [{"id": f"early{i}", "label": r["label"]} for i, r in enumerate(data)]}
    )
    send(model, data, start=T0, prefix="early", labelled=False)
    send(model, data, start=T0 + timedelta(minutes=5), prefix="on")
    send(model, data[:1], start=T0 + timedelta(minutes=5), prefix="on")
    send(model, data, start=T0 + timedelta(hours=2), prefix="out")
    send(model, data, start=T0 + timedelta(minutes=10), prefix="none", labelled=False)
    end = T0 + timedelta(hours=1)
    for start in (T0, T0 + timedelta(minutes=5), None):
        expected = loaded_labels(model, start=start, end=end)
        assert window_label_count(model=model, start=start, end=end) == expected
    assert window_label_count(model=model, start=T0, end=end) == 120  # early + on, each once
    assert window_label_count(model=model, start=T0 + timedelta(minutes=5), end=end) == 60
    assert window_label_count(model=model, start=None, end=T0 + timedelta(hours=3)) == 180
    # the last N: by joining, as before
    for last_n in (30, 100, 500):
        expected = loaded_labels(model, start=None, end=end, last_n=last_n)
        assert window_label_count(model=model, start=None, end=end, last_n=last_n) == expected
