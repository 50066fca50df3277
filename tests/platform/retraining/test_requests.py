import logging
import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from monitoring.models import Alert, MonitoringPolicy, QualityCheck
from retraining.models import JobState, RetrainJob, RetrainPolicy
from retraining.requests import JobAlreadyActive, job_cancel, job_request, jobs_from_alerts
from tests.platform.conftest import make_model


def _alert(model, *, usable: bool = True, kind: str = "accuracy_drop") -> Alert:
    now = timezone.now()
    check = QualityCheck.objects.create(
        model=model, window_spec="600samples", window_start=now - timedelta(hours=1), window_end=now,
        state="done", started_at=now, decisions={"usable_for_training": usable},
    )  # fmt: skip
    return Alert.objects.create(
        model=model, kind=kind, message="drop", opened_by=check, last_check=check, opened_at=now
    )


@pytest.mark.django_db
def test_request_queues_one_job_and_a_second_is_a_conflict() -> None:
    model = make_model()
    job = job_request(model=model, trigger="admin")
    assert job.state == JobState.QUEUED
    with pytest.raises(JobAlreadyActive) as info:
        job_request(model=model, trigger="api")
    assert info.value.job.pk == job.pk and info.value.status_code == 409


@pytest.mark.django_db
def test_a_finished_job_does_not_block_the_next() -> None:
    model = make_model()
    first = job_request(model=model, trigger="admin")
    RetrainJob.objects.filter(pk=first.pk).update(state=JobState.FAILED)
    assert job_request(model=model, trigger="admin").pk != first.pk


@pytest.mark.django_db(transaction=True)
def test_concurrent_triggers_leave_one_active_job() -> None:
    model = make_model()
    barrier = threading.Barrier(6)
    outcomes: list[str] = []

    def trigger() -> None:
        barrier.wait()
        try:
            job_request(model=model, trigger="api")
            outcomes.append("created")
        except JobAlreadyActive:
            outcomes.append("conflict")
        finally:
            connection.close()

    threads = [threading.Thread(target=trigger) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["conflict"] * 5 + ["created"]
    assert RetrainJob.objects.filter(model=model).count() == 1


@pytest.mark.django_db
def test_cancelling_a_queued_job_cancels_it_at_once() -> None:
    job = job_cancel(job=job_request(model=make_model(), trigger="admin"))
    assert job.state == JobState.CANCELLED and job.finished_at is not None


@pytest.mark.django_db
def test_cancelling_a_running_job_asks_it_to_stop() -> None:
    job = job_request(model=make_model(), trigger="admin")
    RetrainJob.objects.filter(pk=job.pk).update(state=JobState.RUNNING)
    job = job_cancel(job=job)
    assert job.state == JobState.RUNNING and job.cancel_requested


def _auto(model) -> None:
    MonitoringPolicy.objects.update_or_create(model=model, defaults={"auto_retrain": True})


@pytest.mark.django_db
def test_an_accuracy_alert_starts_a_job_when_auto_retrain_is_on() -> None:
    model = make_model()
    _auto(model)
    alert = _alert(model)
    assert jobs_from_alerts() == 1
    job = RetrainJob.objects.get(model=model)
    assert (job.trigger, job.alert_id) == ("alert", alert.pk)


@pytest.mark.django_db
def test_the_estimated_accuracy_alert_also_starts_a_job() -> None:
    model = make_model()
    _auto(model)
    _alert(model, kind="estimated_accuracy_drop")
    assert jobs_from_alerts() == 1


@pytest.mark.django_db
def test_no_job_without_auto_retrain() -> None:
    model = make_model()
    _alert(model)
    assert jobs_from_alerts() == 0


@pytest.mark.django_db
def test_no_job_from_a_window_unusable_for_training() -> None:
    model = make_model()
    _auto(model)
    _alert(model, usable=False)
    assert jobs_from_alerts() == 0


@pytest.mark.django_db
def test_data_drift_alone_starts_no_job() -> None:
    model = make_model()
    _auto(model)
    _alert(model, kind="data_drift")
    assert jobs_from_alerts() == 0


@pytest.mark.django_db
def test_an_alert_whose_challenger_was_promoted_makes_no_second_job() -> None:
    model = make_model()
    _auto(model)
    _alert(model)
    jobs_from_alerts()
    RetrainJob.objects.update(state=JobState.SUCCEEDED, decision="promoted", decided_at=timezone.now())
    RetrainPolicy.objects.filter(model=model).update(cooldown_minutes=0)
    assert jobs_from_alerts() == 0


@pytest.mark.django_db
def test_a_later_check_where_the_promoted_champion_still_breaches_retrains_again() -> None:
    from registry.models import ModelVersion

    model = make_model()
    _auto(model)
    alert = _alert(model)
    jobs_from_alerts()
    version = ModelVersion.objects.create(model=model, version=1, status="champion")
    RetrainJob.objects.update(state=JobState.SUCCEEDED, decision="promoted", decided_at=timezone.now(),
                              result_version=version)  # fmt: skip
    RetrainPolicy.objects.filter(model=model).update(cooldown_minutes=0)
    later = QualityCheck.objects.create(
        model=model, window_spec="600samples", window_start=timezone.now(), window_end=timezone.now(),
        state="done", started_at=timezone.now(), finished_at=timezone.now() + timedelta(seconds=1), version=version,
        decisions={"usable_for_training": True, "accuracy_drop": True},
    )  # fmt: skip
    Alert.objects.filter(pk=alert.pk).update(last_check=later)
    assert jobs_from_alerts() == 1


@pytest.mark.django_db
def test_an_alert_whose_challenger_failed_the_gate_retries_after_the_cooldown() -> None:
    model = make_model()
    _auto(model)
    _alert(model)
    jobs_from_alerts()
    RetrainJob.objects.update(state=JobState.SUCCEEDED, decision="gate_failed")
    assert jobs_from_alerts() == 0
    RetrainPolicy.objects.filter(model=model).update(cooldown_minutes=0)
    assert jobs_from_alerts() == 1


@pytest.mark.django_db
def test_retrain_cooldown_holds_back_a_new_alerts_job() -> None:
    model = make_model()
    _auto(model)
    first = _alert(model)
    jobs_from_alerts()
    RetrainJob.objects.update(state=JobState.SUCCEEDED)
    first.state = "resolved"
    first.save()
    _alert(model)
    assert jobs_from_alerts() == 0
    RetrainPolicy.objects.filter(model=model).update(cooldown_minutes=0)
    assert jobs_from_alerts() == 1


@pytest.mark.django_db
def test_no_alert_job_while_an_admin_job_is_active() -> None:
    model = make_model()
    _auto(model)
    job_request(model=model, trigger="admin")
    _alert(model)
    assert jobs_from_alerts() == 0


@pytest.mark.django_db
def test_a_request_is_logged_with_its_job_and_model_ids(caplog: pytest.LogCaptureFixture) -> None:
    model = make_model()
    with caplog.at_level(logging.INFO, logger="retraining.requests"):
        job = job_request(model=model, trigger="admin")
    assert f"retrain job={job.pk} model={model.pk} requested" in caplog.text
