"""Enqueue a Celery task by its name, after the current transaction commits.

The platform never imports the task modules (they import the platform's services): it names
the task (constants in workers/queues.py) and Celery routes it by that name. Sending after
commit means the worker always finds the rows the task is about.

A broker outage never fails the work that enqueued (a finished check stays finished, a request
still answers): the refused message is kept in the outbox table and re-sent by `outbox_flush`
(a beat task every 30 s) once the broker answers again.
"""

import logging
from functools import partial
from typing import Any

from django.db import transaction

from core.models import OutboxMessage
from core.unavailable import broker_errors
from workers.celery_app import app

logger = logging.getLogger(__name__)

# Options that still mean the same thing when the message is re-sent later. `expires` is
# dropped on purpose: a check dispatched during an outage must still run afterwards.
KEPT_OPTIONS = ("queue", "countdown", "priority", "task_id")


def enqueue(
    name: str, *, args: list[Any] | tuple[Any, ...] = (), queue: str | None = None, **options: Any
) -> None:
    """Send task `name` with `args` once the transaction commits (at once outside of one).

    `queue` overrides the route in workers/queues.py; other options (`expires`, `countdown`,
    ...) go to `send_task` unchanged. If the broker is down the message goes to the outbox.
    """
    if queue is not None:
        options["queue"] = queue
    transaction.on_commit(partial(_send_or_keep, name, list(args), options))


def _send_or_keep(name: str, args: list[Any], options: dict[str, Any]) -> None:
    try:
        app.send_task(name, args=args, **options)
    except broker_errors() + (OSError,) as exc:
        kept = {k: v for k, v in options.items() if k in KEPT_OPTIONS}
        OutboxMessage.objects.create(name=name, args=args, options=kept, last_error=repr(exc)[:2000])
        logger.warning("broker down: %s%s kept in the outbox (%r)", name, tuple(args), exc)


def outbox_flush(*, limit: int = 1000) -> int:
    """Re-send kept messages, oldest first; stops at the first refusal. Returns how many went."""
    sent = 0
    with transaction.atomic():
        # Rows locked while sending: two flushers never send the same message (PostgreSQL).
        pending = OutboxMessage.objects.select_for_update(skip_locked=True).order_by("id")[:limit]
        for message in pending:
            try:
                app.send_task(message.name, args=message.args, **message.options)
            except broker_errors() + (OSError,) as exc:
                OutboxMessage.objects.filter(pk=message.pk).update(
                    attempts=message.attempts + 1, last_error=repr(exc)[:2000]
                )
                logger.warning("outbox: broker still down after %s re-sent (%r)", sent, exc)
                break
            message.delete()
            sent += 1
    if sent:
        logger.info("outbox: re-sent %s message(s)", sent)
    return sent
