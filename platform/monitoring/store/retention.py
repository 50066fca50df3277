"""Retention of raw payloads: a model's features older than its policy's
``payload_retention_days`` are dropped by a beat task; the index rows (id, time, version,
prediction), labels, checks and summaries stay.

A live part whose hour is wholly before the cutoff is rewritten with its feature columns null
(same rows, same schema: predictions, probabilities and the index rows' part_row stay valid) and
swapped in like a compaction, in one transaction (``payload_dropped``); the old file is retired
and ``collect`` deletes it after the grace (a check may be reading it). Samples still stored as
JSON rows (an upgraded install before ``samples_to_columnar``) are left to that command; their
parts are then dropped like any other.

A check whose window reaches before the cutoff runs only what needs no raw features and says so
(``retention_note``); over whole summarised hours, that includes the categorical features' drift
and data quality, from the counts the hours' summaries keep (``from_summaries`` names them).
"""

import logging
from datetime import datetime, timedelta
from typing import Any

import pyarrow as pa
from django.db import transaction
from django.utils import timezone

from monitoring.models import MonitoringPolicy, PredictionSample, SamplePart
from monitoring.store.parts import FEATURE, hour_of, part_read, part_write

logger = logging.getLogger(__name__)
HOUR = timedelta(hours=1)
# What a window past retention can and cannot run.
NEED_FEATURES = ["input drift", "data quality", "multivariate drift", "segments", "regression estimate (DLE)"]
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


def _without_features(table: pa.Table) -> pa.Table:
    for i, field in enumerate(table.schema):
        if field.name.startswith(FEATURE):
            table = table.set_column(i, field, pa.nulls(len(table), field.type))
    return table


def part_payload_drop(part: SamplePart, now: datetime) -> bool:
    """Swap the part for a copy without features → False when a compaction retired it first."""
    table = _without_features(part_read(part.name))
    name, size = part_write(model_id=part.model_id, bucket=part.bucket, table=table)
    with transaction.atomic():
        # Locked like compaction's swap: a part either of them replaces is gone for the other.
        if not SamplePart.objects.select_for_update().filter(pk=part.pk, retired_at__isnull=True).exists():
            return False  # the written file is an orphan: collect deletes it
        new = SamplePart.objects.create(
            model_id=part.model_id,
            bucket=part.bucket,
            name=name,
            rows=part.rows,
            indexed=part.indexed,
            size=size,
            created_at=now,
            compacted=part.compacted,
            payload_dropped=True,
            summary=part.summary,  # the features' counts outlive their values
        )
        PredictionSample.objects.filter(part_id=part.pk).update(part=new)
        SamplePart.objects.filter(pk=part.pk).update(retired_at=now)
    return True


def _model_expire(model_id: int, cutoff: datetime, now: datetime) -> int:
    """Parts rewritten of one model."""
    # A part's hour is wholly before the cutoff: bucket + 1 h <= cutoff.
    old = SamplePart.objects.filter(
        model_id=model_id, retired_at__isnull=True, payload_dropped=False, bucket__lte=hour_of(cutoff) - HOUR
    )
    return sum(part_payload_drop(part, now) for part in old)


def payloads_expire(*, now: datetime | None = None) -> int:
    """Drop every model's payloads past its retention → parts rewritten."""
    now = now or timezone.now()
    done = 0
    for policy in MonitoringPolicy.objects.filter(payload_retention_days__gt=0):
        cutoff = retention_cutoff(policy, now=now)
        assert cutoff is not None
        parts = _model_expire(policy.model_id, cutoff, now)
        if parts:
            logger.info("retention: model=%s before=%s parts=%s", policy.model_id, cutoff, parts)
        done += parts
    return done
