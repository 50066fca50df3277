"""The model page's time range, read from and written back to the URL (?range=24h, or
?range=custom&start=…&end=…). Presets end at the model's newest check, so a model whose traffic
stopped (or a backfill) still shows its last stretch instead of an empty chart."""

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from urllib.parse import urlencode

from django.http import QueryDict
from django.utils import timezone

PRESETS = {
    "1h": timedelta(hours=1),
    "24h": timedelta(days=1),
    "7d": timedelta(days=7),
    "30d": timedelta(days=30),
}
PRESET_LABELS = {"1h": "last hour", "24h": "last day", "7d": "last week", "30d": "last 30 days", "all": "all"}
DEFAULT = "7d"
INPUT_FORMAT = "%Y-%m-%dT%H:%M"  # <input type="datetime-local">, read as UTC


@dataclass(frozen=True)
class TimeRange:
    key: str  # a preset, "all" or "custom"
    start: datetime | None
    end: datetime | None
    error: str = ""

    @property
    def query(self) -> str:
        """The query string that reproduces this range."""
        if self.key == "custom" and self.start and self.end:
            return urlencode(
                {
                    "range": "custom",
                    "start": self.start.strftime(INPUT_FORMAT),
                    "end": self.end.strftime(INPUT_FORMAT),
                }
            )
        return urlencode({"range": self.key})

    @property
    def label(self) -> str:
        if self.key == "custom" and self.start and self.end:
            return f"{self.start:%Y-%m-%d %H:%M} → {self.end:%Y-%m-%d %H:%M} UTC"
        return PRESET_LABELS.get(self.key, self.key)

    @property
    def start_input(self) -> str:
        """The start as an <input type="datetime-local"> value."""
        return self.start.strftime(INPUT_FORMAT) if self.start else ""

    @property
    def end_input(self) -> str:
        return self.end.strftime(INPUT_FORMAT) if self.end else ""


def _parse(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        return None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def time_range_parse(params: QueryDict, *, newest: datetime | None) -> TimeRange:
    """The range a request asks for; an unreadable one falls back to the default and says why."""
    key = params.get("range") or DEFAULT
    anchor = newest or timezone.now()
    if key == "all":
        return TimeRange("all", None, None)
    if key == "custom":
        start, end = _parse(params.get("start")), _parse(params.get("end"))
        if start and end and start < end:
            return TimeRange("custom", start, end)
        fallback = time_range_parse(QueryDict(), newest=newest)
        return TimeRange(
            fallback.key, fallback.start, fallback.end, "custom range needs a start before its end"
        )
    if key not in PRESETS:
        fallback = time_range_parse(QueryDict(), newest=newest)
        return TimeRange(fallback.key, fallback.start, fallback.end, f"unknown range {key!r}")
    # The end is just past the newest check so that check is inside.
    return TimeRange(key, anchor - PRESETS[key], anchor + timedelta(seconds=1))
