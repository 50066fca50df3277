"""A running job's progress: every epoch recorded, written at most every PROGRESS_SECONDS, the last
epochs flushed when the run ends."""

import time

import pytest

from retraining import execution
from retraining.models import RetrainJob
from retraining.requests import job_request
from tests.platform.retraining.factories import retrainable_model
from workers.training import engine


@pytest.mark.django_db(transaction=True)
def test_progress_is_written_at_most_every_progress_seconds_and_flushed_at_the_end(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    job = job_request(model=retrainable_model(), trigger="admin")
    # An hour longer than this machine has been up (time.monotonic() counts from boot): the
    # first progress is still written at once.
    monkeypatch.setattr(execution, "PROGRESS_SECONDS", time.monotonic() + 3600.0)
    watch = execution._Watch(job.pk, engine.TrainingPlan(batch_size=8, estimated_bytes=1000))
    watch.start(500)
    for epoch in range(1, 501):
        watch.progress(engine.Progress(epoch, epoch * 4, 1.0 / epoch, None, 500, steps_per_epoch=4))
    written = RetrainJob.objects.get(pk=job.pk).progress
    assert written["epoch"] == 1 and len(written["history"]) == 1  # the first at once, then none for an hour

    watch.flush()
    written = RetrainJob.objects.get(pk=job.pk).progress
    assert written["epoch"] == 500 and written["step"] == 2000
    assert [row[0] for row in written["history"]] == list(range(1, 501))  # no epoch lost to the throttle
    assert len(written["peaks"]) == 500 and written["peaks"][-1][1] == 1000
    watch.flush()  # nothing new: a second flush writes nothing and keeps the last progress
    assert RetrainJob.objects.get(pk=job.pk).progress == written
