"""Garbage collection of part files: a file no SamplePart row names (its request failed, or a
compaction was killed before its swap) and a retired part (replaced by a compacted one), once
both are older than DRIFTWATCH_PART_GRACE_SECONDS (a request or a check may still be using them).
A fanned-out check's slice file no running check's slice names (its check was given up, taken
over or deleted, or its task was killed before it committed) goes after the same grace."""

import logging
from collections.abc import Iterator
from datetime import datetime, timedelta

from django.conf import settings
from django.core.files.storage import default_storage
from django.utils import timezone

from monitoring.models import CheckSlice, CheckState, SamplePart
from monitoring.store.parts import PREFIX, part_written_at

# A fanned-out check's slice files (monitoring.fanout):
# checks/<check>/<written, ms since the epoch>-<attempt>-<slice>-<uuid>.npz
SLICES = "checks"

logger = logging.getLogger(__name__)


def _files(folder: str) -> Iterator[str]:
    """Every file under the folder of the storage (local or S3), by name."""
    if not default_storage.exists(folder):
        return
    folders, files = default_storage.listdir(folder)
    for name in files:
        yield f"{folder}/{name}"
    for sub in folders:
        yield from _files(f"{folder}/{sub}")


def parts_collect(*, now: datetime | None = None) -> int:
    """Delete orphaned and retired part files past the grace → how many files went."""
    now = now or timezone.now()
    before = now - timedelta(seconds=settings.DRIFTWATCH_PART_GRACE_SECONDS)
    deleted = 0
    for part in SamplePart.objects.filter(retired_at__lt=before):
        # The row goes first: a kill between the two leaves an orphan file the next run deletes.
        SamplePart.objects.filter(pk=part.pk).delete()
        default_storage.delete(part.name)
        logger.info("parts: retired part=%s model=%s deleted", part.name, part.model_id)
        deleted += 1
    for name in _files(PREFIX):
        if _old(name, before) and not SamplePart.objects.filter(name=name).exists():
            default_storage.delete(name)
            logger.info("parts: orphan file=%s deleted", name)
            deleted += 1
    running = CheckSlice.objects.filter(quality_check__state=CheckState.RUNNING)
    for name in _files(SLICES):
        if _old(name, before) and not running.filter(result=name).exists():
            default_storage.delete(name)
            logger.info("checks: slice file=%s of no running check deleted", name)
            deleted += 1
    return deleted


def _old(name: str, before: datetime) -> bool:
    """Written before ``before`` (a request or a slice in flight may be about to commit it)."""
    return (part_written_at(name) or default_storage.get_modified_time(name)) < before
