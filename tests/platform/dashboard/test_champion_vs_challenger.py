"""Champion vs challenger on the model page: both columns with lineage, quality and the paired
gate when a challenger exists, staff buttons in place, and a plain sentence when none does."""

import re
from datetime import UTC, datetime

import pytest
from django.contrib.auth.models import User
from django.core.files.base import ContentFile
from django.test import Client

from monitoring.checks import quality_check_run
from monitoring.models import MonitoringPolicy, QualityCheck
from monitoring.window import scheduled_window
from registry.models import ModelVersion, RegisteredModel, VersionStatus
from registry.services import version_create
from retraining.models import Decision, RetrainJob
from tests.platform.conftest import make_model
from tests.platform.retraining.factories import drifted_model, run

pytestmark = pytest.mark.django_db


def _client(staff: bool) -> Client:
    client = Client()
    client.force_login(User.objects.create_user("u", password="pw-u-12345678", is_staff=staff))
    return client


def versus_table(page: str) -> str:
    match = re.search(r'<table class="grid versus">.*?</table>', page, re.S)
    assert match, "no champion vs challenger table"
    return match.group(0)


def row(table: str, label: str) -> list[str]:
    """The cells of the row headed ``label``, as text."""
    match = re.search(rf"<tr[^>]*><th>{re.escape(label)}</th>(.*?)</tr>", table, re.S)
    assert match, f"no row {label!r}"
    cells = re.findall(r"<td[^>]*>(.*?)</td>", match.group(1), re.S)
    return [" ".join(re.sub(r"<[^>]+>", " ", c).split()) for c in cells]


def checked(model: RegisteredModel) -> QualityCheck:
    policy = MonitoringPolicy.objects.get(model=model)
    check = quality_check_run(model_id=model.pk, window=scheduled_window(policy, datetime.now(UTC)))
    assert check is not None
    return QualityCheck.objects.get(pk=check.pk)


@pytest.fixture
def awaiting(db: None) -> RetrainJob:
    """A drifted model checked once, then retrained under manual promotion: v2 awaits approval."""
    model = drifted_model(promotion="manual")
    checked(model)
    job = run(model)
    assert job.decision == Decision.AWAITING_APPROVAL and job.result_version is not None
    return job


def test_a_model_without_a_challenger_says_so_beside_its_champion() -> None:
    model = make_model()
    version_create(model=model, artifact=ContentFile(b"w", name="m.bin"), metrics={"accuracy": 0.91})
    page = _client(staff=False).get("/models/churn/").content.decode()
    assert "No challenger" in page
    table = versus_table(page)
    assert row(table, "version") == ["v1 champion"]
    assert row(table, "metrics at training") == ["accuracy 0.910"]


def test_a_model_without_any_version_says_so() -> None:
    make_model()
    page = _client(staff=False).get("/models/churn/").content.decode()
    assert "No version uploaded yet." in page and 'class="grid versus"' not in page


def test_a_challenger_awaiting_approval_stands_beside_the_champion_with_lineage_quality_and_gate(
    awaiting: RetrainJob,
) -> None:
    challenger = awaiting.result_version
    assert challenger is not None
    check = QualityCheck.objects.get(model=awaiting.model)
    page = _client(staff=False).get("/models/concept/").content.decode()
    table = versus_table(page)
    assert row(table, "version") == ["v1 champion", f"v{challenger.version} candidate"]
    assert row(table, "trained from") == ["—", "v1"]
    assert row(table, "made by")[1] == f"retrain job #{awaiting.pk} (api)"
    window = row(table, "data window")[1]
    assert f"{challenger.training_samples} samples" in window and challenger.training_data_end is not None
    assert f"{challenger.training_data_end:%Y-%m-%d %H:%M}" in window
    # The champion served the checked window (its predictions name no version); the challenger none.
    realised = row(table, "latest realised accuracy")
    assert realised[0].startswith(f"{check.metrics['accuracy']:.3f} check #{check.pk}")
    assert realised[1] == "— no labelled window"
    estimated = row(table, "latest estimated accuracy")
    assert estimated[0].startswith(f"{check.estimated['value']:.3f} check #{check.pk}")
    assert row(table, "decision")[1] == "awaiting_approval"
    gate = awaiting.gate
    assert f"{gate['test']} on {gate['n']} holdout rows" in page
    assert f"champion {gate['champion']:.4f} · challenger {gate['challenger']:.4f}" in page
    assert f"{gate['p_value']:.4g}" in page
    assert "Approve v" not in page, "no buttons for non-staff"


def test_staff_approve_in_the_challenger_column_then_roll_back_in_the_champion_column(
    awaiting: RetrainJob,
) -> None:
    client = _client(staff=True)
    table = versus_table(client.get("/models/concept/").content.decode())
    approve = f'action="/retrain-jobs/{awaiting.pk}/approve"'
    assert approve in table and f'action="/retrain-jobs/{awaiting.pk}/reject"' in table
    assert client.post(f"/retrain-jobs/{awaiting.pk}/approve").status_code == 302

    page = client.get("/models/concept/").content.decode()
    table = versus_table(page)
    assert "No challenger" in page
    assert row(table, "version") == [f"v{awaiting.result_version.version} champion"]  # type: ignore[union-attr]
    assert row(table, "trained from") == ["v1"]
    assert f'action="/retrain-jobs/{awaiting.pk}/rollback"' in table and "Roll back to v1" in table
    client.post(f"/retrain-jobs/{awaiting.pk}/rollback")
    assert ModelVersion.objects.get(model=awaiting.model, status=VersionStatus.CHAMPION).version == 1


def test_a_candidate_older_than_the_champion_is_no_challenger() -> None:
    model = make_model()
    old = version_create(model=model, artifact=ContentFile(b"a", name="m.bin"))
    version_create(model=model, artifact=ContentFile(b"b", name="m.bin"), champion=True)
    ModelVersion.objects.filter(pk=old.pk).update(status=VersionStatus.CANDIDATE)
    page = _client(staff=True).get("/models/churn/").content.decode()
    assert "No challenger" in page and row(versus_table(page), "version") == ["v2 champion"]


def test_an_uploaded_candidate_is_a_challenger_without_a_gate() -> None:
    model = make_model()
    version_create(model=model, artifact=ContentFile(b"a", name="m.bin"))
    version_create(model=model, artifact=ContentFile(b"b", name="m.bin"), source="uploaded by ci")
    page = _client(staff=True).get("/models/churn/").content.decode()
    table = versus_table(page)
    assert row(table, "version") == ["v1 champion", "v2 candidate"]
    assert row(table, "made by") == ["uploaded", "uploaded by ci"]
    assert "No gate result: the challenger was uploaded, not retrained." in page
