"""What the client did: counters, drops by reason, and drop logging that cannot flood."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

logger = logging.getLogger("driftwatch_client")

# Why an item was dropped (every reason is always present in stats().dropped):
DROP_REASONS = (
    "queue_full",  # the in-memory queue was at its count or byte bound when it was logged
    "invalid",  # could not be encoded, or the server's 400 named its row (message logged)
    "rejected",  # the server refused the whole request for good: 401/403/404/... (message logged)
    "gave_up",  # still undeliverable give_up_after seconds after it was logged
    "shutdown",  # unsent when close() / the exit-time flush reached its deadline, or logged after close()
)
LOG_EVERY_SECONDS = 10.0


@dataclass(frozen=True)
class Stats:
    """A snapshot. sent = rows the server answered for (accepted + duplicates, matched + pending)."""

    sent: int
    predictions_sent: int
    labels_sent: int
    duplicates: int
    retried: int
    requests: int
    queued: int
    queued_bytes: int
    dropped: dict[str, int] = field(default_factory=dict)
    last_error: str = ""

    @property
    def dropped_total(self) -> int:
        return sum(self.dropped.values())


class Counters:
    """Updated under the monitor's lock; a drop warning at most once per reason every 10 s."""

    def __init__(self) -> None:
        self.predictions_sent = 0
        self.labels_sent = 0
        self.duplicates = 0
        self.retried = 0
        self.requests = 0
        self.last_error = ""
        self.dropped = dict.fromkeys(DROP_REASONS, 0)
        self._unlogged = dict.fromkeys(DROP_REASONS, 0)
        self._logged_at = dict.fromkeys(DROP_REASONS, -LOG_EVERY_SECONDS)

    def drop(self, reason: str, n: int, message: str = "") -> str | None:
        """Count a drop; returns the warning to log (outside the monitor's lock) when one is due."""
        self.dropped[reason] += n
        self._unlogged[reason] += n
        if message:
            self.last_error = message
        now = time.monotonic()
        if now - self._logged_at[reason] < LOG_EVERY_SECONDS:
            return None
        count, self._unlogged[reason], self._logged_at[reason] = self._unlogged[reason], 0, now
        detail = f" ({message})" if message else ""
        return f"dropped {count} item(s): {reason}{detail}; {self.dropped[reason]} for this reason so far"

    def snapshot(self, queued: int, queued_bytes: int) -> Stats:
        return Stats(
            sent=self.predictions_sent + self.labels_sent,
            predictions_sent=self.predictions_sent,
            labels_sent=self.labels_sent,
            duplicates=self.duplicates,
            retried=self.retried,
            requests=self.requests,
            queued=queued,
            queued_bytes=queued_bytes,
            dropped=dict(self.dropped),
            last_error=self.last_error,
        )
