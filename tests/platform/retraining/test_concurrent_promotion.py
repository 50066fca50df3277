"""Approve and rollback racing on one model keep the champion and its reference a matching pair."""

import threading
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection

from core.errors import Conflict
from registry.models import ModelVersion, ReferenceDataset
from retraining.models import Decision, Promotion, RetrainJob
from retraining.promotion import job_approve, job_rollback
from tests.platform.retraining.factories import drifted_model, run


def _race(*calls: Any) -> list[BaseException]:
    barrier = threading.Barrier(len(calls))
    errors: list[BaseException] = []

    def go(call: Any) -> None:
        try:
            barrier.wait()
            call()
        except Conflict:
            pass  # the loser of the race is refused: that is allowed
        except BaseException as exc:  # noqa: BLE001 (reported by the test)
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=go, args=(c,)) for c in calls]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


@pytest.mark.django_db(transaction=True)
def test_rollback_racing_an_approval_keeps_the_champion_and_reference_consistent() -> None:
    admin = User.objects.create_superuser("root", password="pw-root-12345")
    model = drifted_model(promotion=Promotion.MANUAL)
    ReferenceDataset.objects.filter(model=model).update(is_active=False)  # no reference before
    first = job_approve(job=run(model), user=admin)
    second = run(model)
    assert second.decision == Decision.AWAITING_APPROVAL
    errors = _race(lambda: job_rollback(job=first, user=admin), lambda: job_approve(job=second, user=admin))
    assert errors == []
    champion = ModelVersion.objects.get(model=model, status="champion")
    active = list(ReferenceDataset.objects.filter(model=model, is_active=True))
    serving = RetrainJob.objects.filter(result_version=champion, decision=Decision.PROMOTED).first()
    if serving is None:  # the first job was rolled back and the second lost or never promoted
        assert active == []
    else:
        assert [r.pk for r in active] == [serving.promoted_reference_id]
        job_rollback(job=serving, user=admin)
        restored = list(
            ReferenceDataset.objects.filter(model=model, is_active=True).values_list("pk", flat=True)
        )
        assert restored == ([serving.previous_reference_id] if serving.previous_reference_id else [])
