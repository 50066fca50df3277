"""Retraining tasks: run one job, the beat ticks (jobs from alerts, the reaper), webhooks.

Permanent names (workers/queues.py). ``run_job`` goes to the training queue; the job row, not
the broker's redelivery, is the source of truth: a re-run finds the job claimed and does nothing.
"""

import logging

from monitoring.notify import TransientDeliveryError
from retraining.execution import job_run
from retraining.placement import jobs_place, placement_is_current
from retraining.requests import jobs_from_alerts
from retraining.scheduling import jobs_reap_stale
from retraining.webhooks import webhook_deliver
from workers import queues
from workers.tasks.base import instrumented_task

logger = logging.getLogger(__name__)


@instrumented_task(queues.RETRAIN_RUN)
def run_retrain_job(job_id: int, placement_token: int | None = None) -> str:
    if not placement_is_current(job_id, placement_token):
        logger.info("retrain job %s was placed again since this message: ignored", job_id)
        return "superseded"
    return job_run(job_id=job_id)


@instrumented_task(queues.RETRAIN_PLACE)
def place_retrain_jobs() -> int:
    return jobs_place()


@instrumented_task(queues.RETRAIN_FROM_ALERTS)
def retrain_jobs_from_alerts() -> int:
    return jobs_from_alerts()


@instrumented_task(queues.RETRAIN_REAP)
def reap_stale_retrain_jobs() -> int:
    return jobs_reap_stale()


@instrumented_task(queues.RETRAIN_WEBHOOK, transient=(TransientDeliveryError,), backoff=10, max_retries=5)
def deliver_retrain_webhook(job_id: int, event: str) -> str:
    return webhook_deliver(job_id=job_id, event=event)
