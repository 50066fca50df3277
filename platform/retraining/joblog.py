"""The job's own log: one line per step, on the row (shown in the admin, API and dashboard) and
in the process log with the job and model ids. Every retraining module writes through here."""

import logging

from django.db.models import F, Value
from django.db.models.functions import Concat
from django.utils import timezone

from retraining.models import RetrainJob

logger = logging.getLogger(__name__)


def job_log(job_id: int, message: str) -> None:
    """Append a timestamped line to the job's log (one UPDATE, no read-modify-write race), and
    log it with the job and model ids: every step of a job (planned, placed, running, OOM re-plan,
    trained, succeeded/failed, gate decision, promoted/rolled back, reaper) goes through here."""
    line = f"{timezone.now():%Y-%m-%d %H:%M:%S} {message}\n"
    RetrainJob.objects.filter(pk=job_id).update(log=Concat(F("log"), Value(line)))
    if logger.isEnabledFor(logging.INFO):
        model_id = RetrainJob.objects.filter(pk=job_id).values_list("model_id", flat=True).first()
        logger.info(
            "retrain job=%s model=%s: %s", job_id, model_id, message.splitlines()[0] if message else ""
        )
