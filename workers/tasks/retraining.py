"""Retraining tasks: run one job, the beat ticks (jobs from alerts, the reaper), webhooks.

Permanent names (workers/queues.py). ``run_job`` goes to the training queue; the job row, not
the broker's redelivery, is the source of truth: a re-run finds the job claimed and does nothing.
"""

import logging
from typing import Any

from monitoring.notify import TransientDeliveryError
from retraining.execution import job_run
from retraining.placement import jobs_place, placement_is_current
from retraining.requests import jobs_from_alerts
from retraining.scheduling import jobs_reap_stale
from retraining.webhooks import webhook_deliver
from workers import queues
from workers.celery_app import app

logger = logging.getLogger(__name__)


@app.task(name=queues.RETRAIN_RUN)
def run_retrain_job(job_id: int, placement_token: int | None = None) -> str:
    if not placement_is_current(job_id, placement_token):
        logger.info("retrain job %s was placed again since this message: ignored", job_id)
        return "superseded"
    return job_run(job_id=job_id)


@app.task(name=queues.RETRAIN_PLACE)
def place_retrain_jobs() -> int:
    return jobs_place()


@app.task(name=queues.RETRAIN_FROM_ALERTS)
def retrain_jobs_from_alerts() -> int:
    return jobs_from_alerts()


@app.task(name=queues.RETRAIN_REAP)
def reap_stale_retrain_jobs() -> int:
    return jobs_reap_stale()


@app.task(name=queues.RETRAIN_WEBHOOK, bind=True, max_retries=5, default_retry_delay=10)
def deliver_retrain_webhook(self: Any, job_id: int, event: str) -> str:
    try:
        return webhook_deliver(job_id=job_id, event=event)
    except TransientDeliveryError as exc:
        raise self.retry(exc=exc, countdown=10 * 2**self.request.retries) from exc
