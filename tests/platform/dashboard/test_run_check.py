"""'Run check now': up to the newest labelled prediction, and one check per window however often
it is pressed (defect 7)."""

from datetime import timedelta
from typing import Any

from django.test import Client

from monitoring.models import QualityCheck
from tests.platform.dashboard.conftest import T0
from tests.platform.monitoring.factories import rows, send


def test_pressing_run_check_twice_makes_one_check(staff: Client, story: dict[str, Any]) -> None:
    before = QualityCheck.objects.filter(model=story["model"]).count()
    staff.post("/models/sea/checks/run")
    response = staff.post("/models/sea/checks/run", follow=True)
    assert QualityCheck.objects.filter(model=story["model"]).count() == before + 1
    assert "no new check" in response.content.decode()


def test_run_check_leaves_out_the_newest_batch_still_waiting_for_labels(
    staff: Client, story: dict[str, Any]
) -> None:
    model = story["model"]
    send(model, rows(150, seed=9), start=T0 + timedelta(hours=3), prefix="fresh", labelled=False)
    staff.post("/models/sea/checks/run")
    newest = QualityCheck.objects.filter(model=model).order_by("-pk").first()
    assert newest is not None and newest.n_labelled == newest.n_samples == 400
    assert newest.window_end < T0 + timedelta(hours=3)


def test_run_check_over_a_window_too_large_for_the_request_queues_it(
    staff: Client, story: dict[str, Any], settings: Any
) -> None:
    settings.DRIFTWATCH_SYNC_CHECK_SAMPLES = 399  # the story's window holds 400
    response = staff.post("/models/sea/checks/run", follow=True)
    assert response.status_code == 200, "the model page draws a queued check"
    newest = QualityCheck.objects.filter(model=story["model"]).order_by("-pk").first()
    assert newest is not None and (newest.state, newest.n_samples) == ("queued", 0)
    assert (
        f"Check #{newest.pk}" in response.content.decode()
        and "queued for a worker" in response.content.decode()
    )
    assert staff.get(f"/checks/{newest.pk}/").status_code == 200, "its page draws it while queued"
