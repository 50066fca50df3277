"""What a newcomer reads: baselines named for where they come from, windows in words, one date
format, version metrics as text, a footnote only where its asterisk is."""

import re
from typing import Any

from django.test import Client

from dashboard.templatetags.dashboard_extras import metrics_text
from registry.models import ModelVersion
from registry.services import model_register

DATE = re.compile(r"(\d{4}-)?\d{2}-\d{2} \d{2}:\d{2}")


def test_baseline_names_its_source_instead_of_a_missing_champion(
    staff: Client, story: dict[str, Any]
) -> None:
    page = staff.get("/models/sea/").content.decode()
    assert "champion on reference" not in page
    assert "(the model&#x27;s accuracy on its reference rows)" in page


def test_model_without_a_reference_says_it_cannot_alert(staff: Client) -> None:
    model_register(
        data={"name": "bare", "task": "regression", "features": [{"name": "a", "type": "numerical"}]}
    )
    page = staff.get("/models/bare/").content.decode()
    assert "No reference dataset: this model has no drift, no estimate and no baseline" in page
    assert "POST /api/v1/models/bare/reference" in page
    assert "none: no reference dataset" in page


def test_windows_read_in_words(staff: Client, story: dict[str, Any]) -> None:
    for path in ("/", "/models/sea/", f"/checks/{story['bad'].pk}/"):
        page = staff.get(path).content.decode()
        assert "400samples" not in page and "last 400 samples" in page, path


def test_every_date_on_the_pages_carries_its_year(staff: Client, story: dict[str, Any]) -> None:
    for path in ("/", "/models/sea/", f"/checks/{story['bad'].pk}/", "/alerts/"):
        page = staff.get(path).content.decode()
        dates = [m.group(0) for m in DATE.finditer(page)]
        assert dates and all(m.group(1) for m in DATE.finditer(page)), (path, dates)


def test_version_metrics_are_text_not_a_python_dict(staff: Client, story: dict[str, Any]) -> None:
    ModelVersion.objects.create(
        model=story["model"], version=1, metrics={"accuracy": 0.91234, "f1_macro": 0.9}
    )
    page = staff.get("/models/sea/").content.decode()
    assert "accuracy 0.912 · f1_macro 0.900" in page
    assert "{&#x27;accuracy&#x27;" not in page


def test_home_footnote_appears_only_beside_its_asterisk(staff: Client, story: dict[str, Any]) -> None:
    page = staff.get("/").content.decode()
    assert "</b>*" not in page and "the latest window has no labels yet" not in page


def test_version_metric_counts_read_as_whole_numbers() -> None:
    assert (
        metrics_text({"accuracy": 0.8667, "holdout_samples": 240}) == "accuracy 0.867 · holdout_samples 240"
    )
