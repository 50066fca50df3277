"""celery-beat's rows (django-celery-beat's PeriodicTask), made by each app after migrate and
editable in the admin afterwards."""

from collections.abc import Mapping

from django_celery_beat.models import IntervalSchedule, PeriodicTask

BeatTasks = Mapping[str, tuple[str, int]]  # name of the beat row: (task name, period in seconds)


def beat_rows_ensure(tasks: BeatTasks) -> None:
    """Create the missing rows, each expiring after its own period; never duplicated, and a row
    an admin edited is left as it is."""
    for name, (task, seconds) in tasks.items():
        every, _ = IntervalSchedule.objects.get_or_create(every=seconds, period=IntervalSchedule.SECONDS)
        PeriodicTask.objects.get_or_create(
            name=name, defaults={"task": task, "interval": every, "expire_seconds": seconds}
        )
