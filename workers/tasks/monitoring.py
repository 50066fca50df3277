"""Monitoring tasks: beat ticks, checks, reports and notification deliveries.

Every task has an explicit, permanent `name=` (constants in workers/queues.py): beat rows and
queued messages store it (tests/workers/test_task_names.py pins them).
"""

import logging
from datetime import datetime
from typing import Any

# The sequential detector's engine, imported with the worker (the pool's processes fork from
# it) rather than by its first check: river's package imports scikit-learn and scipy.stats,
# 1.5 s of a first 1M-sample check's detector feed. monitoring.sequential imports it lazily:
# the web and beat processes, which run no check of that size, never pay for it.
import river.drift  # noqa: F401

from monitoring.checks import check_merge_run, checks_labels_refresh, quality_check_run
from monitoring.fanout import slice_run
from monitoring.notify import TransientDeliveryError, notification_deliver, notifications_reap_stuck
from monitoring.reports import check_report_render, reports_reap_stuck
from monitoring.scheduling import checks_dispatch_due, checks_reap_stuck
from monitoring.store.collect import parts_collect
from monitoring.store.compaction import labels_meet_predictions, parts_compact_due
from monitoring.store.retention import payloads_expire
from monitoring.window import parse_window_spec
from workers import queues
from workers.tasks.base import instrumented_task

logger = logging.getLogger(__name__)


@instrumented_task(queues.CHECKS_RUN_DUE)
def run_due_checks() -> int:
    return checks_dispatch_due()


@instrumented_task(queues.CHECKS_REAP_STUCK)
def reap_stuck_checks() -> int:
    return checks_reap_stuck() + notifications_reap_stuck() + reports_reap_stuck()


@instrumented_task(queues.CHECKS_REFRESH_LABELS)
def refresh_labels() -> int:
    return checks_labels_refresh()


@instrumented_task(queues.PARTS_COMPACT)
def compact_parts() -> int:
    labels_meet_predictions()
    return parts_compact_due()


@instrumented_task(queues.PARTS_COLLECT)
def collect_parts() -> int:
    return parts_collect()


@instrumented_task(queues.PAYLOADS_EXPIRE)
def expire_payloads() -> int:
    return payloads_expire()


@instrumented_task(queues.CHECK_MODEL, bind=True)
def check_model(self: Any, model_id: int, window_spec: str, window_end: str) -> int | None:
    window = parse_window_spec(window_spec, datetime.fromisoformat(window_end))
    # The task id owns the row: a redelivery of this message after a kill takes over at once.
    check = quality_check_run(model_id=model_id, window=window, owner=self.request.id or "")
    return check.pk if check else None


@instrumented_task(queues.CHECK_SLICE)
def check_slice(slice_id: int) -> bool:
    return slice_run(slice_id)


@instrumented_task(queues.CHECK_MERGE)
def check_merge(check_id: int, attempt: int) -> int | None:
    check = check_merge_run(check_id=check_id, attempt=attempt)
    return check.pk if check else None


@instrumented_task(
    queues.DELIVER_NOTIFICATION,
    # Backoff 10 s, 20 s, 40 s, ... (at most 5 min), 5 retries.
    transient=(TransientDeliveryError,),
    backoff=10,
    max_retries=5,
)
def deliver_notification(notification_id: int) -> str:
    try:
        return notification_deliver(notification_id=notification_id)
    except TransientDeliveryError:
        raise  # retried by the task wrapper
    except Exception:
        # A refusal (4xx) or bad config: recorded as failed on the row, never retried.
        logger.exception("notification %s failed for good", notification_id)
        return "failed"


@instrumented_task(queues.RENDER_REPORT)
def render_report(check_id: int) -> str | None:
    return check_report_render(check_id=check_id)
