"""Enqueue a Celery task by its name, after the current transaction commits.

The platform never imports the task modules (they import the platform's services): it names
the task (constants in workers/queues.py) and Celery routes it by that name. Sending after
commit means the worker always finds the rows the task is about.
"""

from functools import partial
from typing import Any

from django.db import transaction

from workers.celery_app import app


def enqueue(
    name: str, *, args: list[Any] | tuple[Any, ...] = (), queue: str | None = None, **options: Any
) -> None:
    """Send task `name` with `args` once the transaction commits (at once outside of one).

    `queue` overrides the route in workers/queues.py; other options (`expires`, `countdown`,
    ...) go to `send_task` unchanged.
    """
    if queue is not None:
        options["queue"] = queue
    transaction.on_commit(partial(app.send_task, name, args=list(args), **options))
