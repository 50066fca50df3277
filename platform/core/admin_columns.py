"""Compact values for the admin's changelist columns, so that a list with its filter and the
navigation sidebar fits a 1440 px screen: short times, human sizes, clipped text with the whole
of it in a tooltip."""

from datetime import datetime
from typing import Any

from django.contrib import admin
from django.template.defaultfilters import filesizeformat
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.text import Truncator

EMPTY = "—"


def short_time(value: datetime | None) -> str:
    """`2026-11-30 10:00` (the site's time zone): one format, a third of Django's default width."""
    return EMPTY if value is None else f"{timezone.localtime(value):%Y-%m-%d %H:%M}"


def clipped(value: object, limit: int = 60) -> SafeString | str:
    """The text cut to `limit` characters; the whole of it shows on hover."""
    text = str(value)
    if len(text) <= limit:
        return text
    return format_html('<span title="{}">{}</span>', text, Truncator(text).chars(limit))


def size(value: int | None) -> str:
    return EMPTY if value is None else str(filesizeformat(value)).replace("\xa0", " ")


def duration(seconds: float | None) -> str:
    if seconds is None:
        return EMPTY
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes = seconds / 60
    return f"{minutes:.0f} min" if minutes < 120 else f"{minutes / 60:.1f} h"


@admin.display(description="model", ordering="model__name")
def model_name(row: Any) -> str:
    """The column of a row that belongs to a registered model (a check, an alert, a job, ...)."""
    return clipped(row.model.name, 32)
