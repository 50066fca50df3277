from datetime import timedelta

import pytest
from django.utils import timezone
from django_celery_beat.models import PeriodicTask

from monitoring.models import CheckState, MonitoringPolicy, QualityCheck
from monitoring.scheduling import beat_schedule_ensure, checks_dispatch_due, checks_reap_stuck, window_end_for
from tests.clock import at
from tests.platform.monitoring.factories import monitored_model

NOW = at(hours=2, minutes=7, seconds=30)


@pytest.mark.django_db
def test_window_ends_align_on_the_check_period() -> None:
    policy = MonitoringPolicy(check_every_minutes=15)
    assert window_end_for(policy, NOW) == at(hours=2)


@pytest.mark.django_db(transaction=True)
def test_a_due_policy_is_dispatched_once_per_period() -> None:
    model = monitored_model(check_every_minutes=10)
    assert checks_dispatch_due(now=NOW) == 1
    assert checks_dispatch_due(now=NOW + timedelta(minutes=1)) == 0, "claimed until the next period"
    assert MonitoringPolicy.objects.get(model=model).next_check_at == at(hours=2, minutes=10)
    assert checks_dispatch_due(now=NOW + timedelta(minutes=3)) == 1


@pytest.mark.django_db(transaction=True)
def test_disabled_policy_is_not_dispatched() -> None:
    monitored_model(enabled=False)
    assert checks_dispatch_due(now=NOW) == 0


@pytest.mark.django_db(transaction=True)
def test_reaper_gives_up_after_max_attempts_and_requeues_others() -> None:
    model = monitored_model()
    old = timezone.now() - timedelta(hours=2)
    for spec, attempts in (("1000samples", 1), ("24h", 3)):
        QualityCheck.objects.create(
            model=model,
            window_spec=spec,
            window_start=NOW,
            window_end=NOW,
            state=CheckState.RUNNING,
            started_at=old,
            attempts=attempts,
        )
    assert checks_reap_stuck() == 1
    assert QualityCheck.objects.get(window_spec="24h").state == CheckState.FAILED


@pytest.mark.django_db
def test_beat_rows_exist_once_and_name_pinned_tasks() -> None:
    beat_schedule_ensure()
    beat_schedule_ensure()
    ours = PeriodicTask.objects.filter(name__startswith="driftwatch:", task__startswith="driftwatch.checks.")
    tasks = set(ours.values_list("task", flat=True))
    assert tasks == {
        "driftwatch.checks.run_due",
        "driftwatch.checks.reap_stuck",
        "driftwatch.checks.refresh_labels",
    }
    assert ours.count() == 3
    assert PeriodicTask.objects.filter(task="driftwatch.system.outbox_flush").count() == 1
