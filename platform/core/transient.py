"""Which errors are worth retrying: a database or broker blip, a lock timeout (issue 20 §2.6).

One classification for every task (``workers.tasks.base``) and every service that must tell a
blip from a fault (placement sizing): a transient error leaves the work to be retried with
backoff; anything else (a bad recipe, bad data) is permanent and recorded as the row's failure.
"""

import kombu.exceptions
import redis.exceptions
from django.db import InterfaceError, OperationalError


class TransientError(Exception):
    """Raised by a service for a condition that passes by itself (a lock held elsewhere, say)."""


# OperationalError covers a dropped connection, a lock timeout (PostgreSQL's lock_timeout and
# statement_timeout, SQLite's "database is locked") and a server restart; InterfaceError a
# connection already closed under us. kombu's OperationalError is the broker unreachable.
TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (
    TransientError,
    OperationalError,
    InterfaceError,
    kombu.exceptions.OperationalError,
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    ConnectionError,
    TimeoutError,
)


def is_transient(exc: BaseException, extra: tuple[type[BaseException], ...] = ()) -> bool:
    """True for an error worth retrying (``extra``: a task's own transient errors)."""
    return isinstance(exc, TRANSIENT_ERRORS + extra)
