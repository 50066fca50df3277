"""Retention of raw payloads: a model's features older than its policy's
``payload_retention_days`` are dropped by a beat task; the index rows (id, time, version,
prediction), labels, checks and summaries stay.

Columnar store: a live part whose hour is wholly before the cutoff is retired and its index rows
let go of it (``part`` null: the payload is gone); ``collect`` deletes the file after the grace,
as it does a compacted part's (a check may be reading it). Relational store: the old rows'
features JSON is blanked to {}.

A check whose window reaches before the cutoff runs only what needs no raw features and says so
(``retention_note``).
"""

import logging
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from monitoring.models import MonitoringPolicy, PredictionSample, SamplePart
from monitoring.store.parts import hour_of

logger = logging.getLogger(__name__)
HOUR = timedelta(hours=1)
# What a window past retention can and cannot run.
NEED_FEATURES = ["input drift", "data quality", "multivariate drift", "segments"]
NEED_PREDICTIONS = ["realised metrics", "prediction drift"]


def retention_cutoff(policy: MonitoringPolicy, *, now: datetime | None = None) -> datetime | None:
    """Payloads before this are dropped; None: the policy keeps them forever (null or 0)."""
    if not policy.payload_retention_days:
        return None
    return (now or timezone.now()) - timedelta(days=policy.payload_retention_days)


def retention_note(
    policy: MonitoringPolicy, start: datetime, *, now: datetime | None = None
) -> dict[str, Any] | None:
    """The note a check over a window from ``start`` carries when it reaches before the cutoff."""
    cutoff = retention_cutoff(policy, now=now)
    if cutoff is None or start >= cutoff:
        return None
    return {
        "payloads_dropped_before": cutoff.isoformat(),
        "retention_days": policy.payload_retention_days,
        "skipped": NEED_FEATURES,
        "run": NEED_PREDICTIONS,
    }


def _model_expire(model_id: int, cutoff: datetime, now: datetime) -> tuple[int, int]:
    """(parts retired, relational rows blanked) of one model."""
    parts = 0
    # A part's hour is wholly before the cutoff: bucket + 1 h <= cutoff.
    old = SamplePart.objects.filter(
        model_id=model_id, retired_at__isnull=True, bucket__lte=hour_of(cutoff) - HOUR
    )
    for pk in old.values_list("pk", flat=True):
        with transaction.atomic():
            # Locked like compaction's swap: a part it is merging is either retired here or by it.
            if not SamplePart.objects.select_for_update().filter(pk=pk, retired_at__isnull=True).exists():
                continue
            PredictionSample.objects.filter(part_id=pk).update(part=None, part_row=None)
            SamplePart.objects.filter(pk=pk).update(retired_at=now)
        parts += 1
    blanked = (
        PredictionSample.objects.filter(model_id=model_id, timestamp__lt=cutoff, part__isnull=True)
        .exclude(features={})
        .update(features={})
    )
    return parts, blanked


def payloads_expire(*, now: datetime | None = None) -> int:
    """Drop every model's payloads past its retention → parts retired + rows blanked."""
    now = now or timezone.now()
    done = 0
    for policy in MonitoringPolicy.objects.filter(payload_retention_days__gt=0):
        cutoff = retention_cutoff(policy, now=now)
        assert cutoff is not None
        parts, blanked = _model_expire(policy.model_id, cutoff, now)
        if parts or blanked:
            logger.info(
                "retention: model=%s before=%s parts=%s rows=%s", policy.model_id, cutoff, parts, blanked
            )
        done += parts + blanked
    return done
