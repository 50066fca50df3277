"""The test clock: the one place tests take time from, so the suite passes on any date.

`NOW` is read once per session from `django.utils.timezone.now()` (the clock production code
reads, and the one libfaketime shifts for a whole run). `T0` is a round hour a few days before it:
08:00 UTC three days back, so hour-of-day and window alignment are the same whatever the date
and time the suite runs at, and a day or two of samples after `T0` still lies in the past.

Tests name no calendar date (tests/test_no_calendar_dates.py enforces it): they derive every time
from `T0`/`NOW` with `at(...)`, format expected strings from those datetimes, and move the wall
clock with `wall_clock(...)` (time-machine) where their logic depends on what "now" is.
"""

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Final

import time_machine
from django.utils import timezone

NOW: Final[datetime] = timezone.now().astimezone(UTC)
T0: Final[datetime] = NOW.replace(hour=8, minute=0, second=0, microsecond=0) - timedelta(days=3)
# Beyond ingestion's one-day skew allowance (and any plausible session length).
FUTURE: Final[datetime] = NOW.replace(microsecond=0) + timedelta(days=30)
# Long before T0, for "old" data; still well after 1970, which ingestion refuses.
PAST: Final[datetime] = T0 - timedelta(days=400)


def at(
    *, days: float = 0, hours: float = 0, minutes: float = 0, seconds: float = 0, base: datetime = T0
) -> datetime:
    """T0 (or `base`) shifted by the given amounts: `at(hours=1)` is an hour after T0."""
    return base + timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds)


def iso(when: datetime, *, z: bool = True, tz: bool = True) -> str:
    """ISO 8601 as clients send it: `…T08:00:00Z` (z), `…+00:00` (not z) or naive (not tz)."""
    if not tz:
        return when.replace(tzinfo=None).isoformat()
    text = when.isoformat()
    return text.replace("+00:00", "Z") if z and when.utcoffset() == timedelta(0) else text


def minute(when: datetime) -> str:
    """`YYYY-MM-DD HH:MM`, as messages and the dashboard print times."""
    return f"{when:%Y-%m-%d %H:%M}"


@contextmanager
def wall_clock(when: datetime, *, tick: bool = True) -> Iterator[time_machine.Traveller]:
    """Move this process's wall clock (timezone.now(), datetime.now(), time.time()) to `when`;
    it keeps ticking from there unless tick=False. Monotonic clocks are left alone, so waits and
    timeouts still measure real time. Child processes are not affected: run them under
    libfaketime (`faketime`) where their clock must move."""
    with time_machine.travel(when, tick=tick) as traveller:
        yield traveller
