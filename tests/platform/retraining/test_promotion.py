import pytest

from core.errors import Conflict
from registry.models import ModelVersion, ReferenceDataset
from retraining.models import Decision, Promotion
from retraining.promotion import job_approve, job_reject, job_rollback
from tests.platform.retraining.factories import drifted_model, run

pytestmark = pytest.mark.django_db


def test_approving_a_waiting_challenger_promotes_it(admin_user) -> None:
    job = run(drifted_model(promotion=Promotion.MANUAL))
    job = job_approve(job=job, user=admin_user)
    assert job.decision == Decision.PROMOTED and job.decided_by == admin_user
    assert ModelVersion.objects.get(model=job.model, status="champion").pk == job.result_version_id


def test_rejecting_a_waiting_challenger_keeps_the_champion(admin_user) -> None:
    model = drifted_model(promotion=Promotion.MANUAL)
    old = ModelVersion.objects.get(model=model, status="champion")
    job = job_reject(job=run(model), user=admin_user)
    assert job.decision == Decision.REJECTED
    assert ModelVersion.objects.get(pk=job.result_version_id).status == "rejected"
    assert ModelVersion.objects.get(model=model, status="champion").pk == old.pk


def test_a_decided_job_cannot_be_approved_again(admin_user) -> None:
    job = job_reject(job=run(drifted_model(promotion=Promotion.MANUAL)), user=admin_user)
    with pytest.raises(Conflict):
        job_approve(job=job, user=admin_user)


def test_rollback_restores_the_previous_champion_and_its_reference(admin_user) -> None:
    model = drifted_model()
    old = ModelVersion.objects.get(model=model, status="champion")
    old_reference = ReferenceDataset.objects.get(model=model, is_active=True)
    job = run(model)
    assert job.decision == Decision.PROMOTED
    job = job_rollback(job=job, user=admin_user)
    assert job.decision == Decision.ROLLED_BACK
    assert ModelVersion.objects.get(model=model, status="champion").pk == old.pk
    assert ModelVersion.objects.get(pk=job.result_version_id).status == "retired"
    assert ReferenceDataset.objects.get(model=model, is_active=True).pk == old_reference.pk


def test_rollback_twice_is_a_conflict(admin_user) -> None:
    job = job_rollback(job=run(drifted_model()), user=admin_user)
    with pytest.raises(Conflict):
        job_rollback(job=job, user=admin_user)


def test_request_approve_and_rollback_are_audited(admin_user) -> None:
    from core.models import AuditEvent

    job = job_approve(job=run(drifted_model(promotion=Promotion.MANUAL)), user=admin_user)
    job_rollback(job=job, user=admin_user)
    events = list(
        AuditEvent.objects.filter(target_id=str(job.pk)).order_by("pk").values_list("action", "actor_label")
    )
    assert events == [
        ("retrain.request", "retraining (api)"),
        ("retrain.promote", admin_user.username),
        ("retrain.rollback", admin_user.username),
    ]


def test_rollback_of_a_model_that_had_no_reference_leaves_none_active(admin_user) -> None:
    model = drifted_model(promotion=Promotion.MANUAL)
    ReferenceDataset.objects.filter(model=model).update(is_active=False)
    job = job_approve(job=run(model), user=admin_user)
    assert ReferenceDataset.objects.filter(model=model, is_active=True).count() == 1  # the holdout
    job_rollback(job=job, user=admin_user)
    assert not ReferenceDataset.objects.filter(model=model, is_active=True).exists()
