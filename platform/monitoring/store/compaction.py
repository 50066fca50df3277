"""Compaction: an hour's live parts merged into one, swapped in atomically.

The merged file is written first (a kill then leaves an orphan file that ``collect`` deletes);
then one transaction locks the hour's parts, repoints their index rows to the merged part and
retires them. A check lists parts and masks in one statement, so it sees the old parts or the
merged one, never both or neither; the retired files stay for a grace (a check may be reading
them) and are deleted by ``collect``.
"""

import logging
from collections import defaultdict
from datetime import datetime, timedelta
from typing import Any

import numpy as np
import pyarrow as pa
from django.conf import settings
from django.db import connection, transaction
from django.db.models import BooleanField, Exists, ExpressionWrapper, OuterRef, Q, Subquery
from django.utils import timezone

from monitoring.models import GroundTruth, PredictionSample, SamplePart
from monitoring.store.parts import hour_of, part_read, part_write
from monitoring.store.source import window_parts
from monitoring.store.summaries import part_summary
from registry.models import RegisteredModel

logger = logging.getLogger(__name__)
HOUR = timedelta(hours=1)


# Lone clean parts summarised per compaction run: an upgraded install's older hours are
# summarised a batch per run, not all in one.
SUMMARISE_PER_RUN = 200


def parts_compact_due(*, now: datetime | None = None) -> int:
    """Compact every hour that is over (by DRIFTWATCH_COMPACT_AFTER_SECONDS) and has more than
    one live part or a part with duplicates → hours compacted. An hour's lone clean part has
    nothing to merge: it is given its summary in place (not counted; at most SUMMARISE_PER_RUN a
    run). An hour whose file cannot be read is logged and left as it is; the others go on."""
    now = now or timezone.now()
    closed = hour_of(now - timedelta(seconds=settings.DRIFTWATCH_COMPACT_AFTER_SECONDS)) - HOUR
    hours: dict[tuple[int, datetime], list[Any]] = defaultdict(list)  # SampleParts, annotated
    live = (
        SamplePart.objects.filter(retired_at__isnull=True, bucket__lte=closed)
        .defer("summary")  # a summary is up to a few MB: whether there is one is enough here
        .annotate(summarised=ExpressionWrapper(Q(summary__isnull=False), output_field=BooleanField()))
    )
    for part in live:
        hours[(part.model_id, part.bucket)].append(part)
    done = 0
    lone = []
    for (model_id, bucket), parts in sorted(hours.items()):
        if len(parts) > 1 or not parts[0].is_clean:
            try:
                done += part_compact(model_id=model_id, bucket=bucket, now=now)
            except (OSError, pa.ArrowException) as exc:  # one unreadable hour stops no other
                logger.warning("compaction: model=%s hour=%s not compacted: %s", model_id, bucket, exc)
        elif not parts[0].summarised and not parts[0].payload_dropped:
            lone.append(parts[0])
    for part in lone[:SUMMARISE_PER_RUN]:
        try:
            part_summarize(part)
        except (OSError, pa.ArrowException) as exc:
            logger.warning("compaction: part=%s not summarised: %s", part.name, exc)
    return done


def part_summarize(part: SamplePart) -> bool:
    """Write a clean live part's summary → False when it was retired or summarised meanwhile.
    A window reading it before sees it without one (and reads its columns), after with it."""
    model = RegisteredModel.objects.get(pk=part.model_id)
    summary = part_summary(model, part_read(part.name))
    return bool(
        SamplePart.objects.filter(pk=part.pk, retired_at__isnull=True, summary__isnull=True).update(
            summary=summary
        )
    )


def labels_meet_predictions() -> int:
    """Give each label that came before its prediction its prediction's timestamp, now that the
    prediction is in → labels given one. A window finds a waiting label through the predictions
    (``window.LABELS_IN_RANGE``); this keeps that path short. Run by the compaction task."""
    waiting = GroundTruth.objects.filter(sample_at__isnull=True)
    given = 0
    for model_id in waiting.values_list("model_id", flat=True).distinct().order_by():
        predicted = PredictionSample.objects.filter(model_id=model_id, sample_id=OuterRef("sample_id"))
        given += (
            waiting.filter(model_id=model_id)
            .filter(Exists(predicted))
            .update(sample_at=Subquery(predicted.values("timestamp")[:1]))
        )
    return given


def part_compact(*, model_id: int, bucket: datetime, now: datetime | None = None) -> int:
    """Merge the hour's live parts into one → 1, or 0 when there was nothing to merge or another
    compactor swapped first."""
    now = now or timezone.now()
    model = RegisteredModel.objects.get(pk=model_id)
    found = window_parts(model, bucket, bucket + HOUR)
    if not found:
        return 0
    tables, old_ids = [], []
    for part in found:
        table = part_read(part.name)
        tables.append(table if part.kept is None else table.take(pa.array(part.kept)))
        old_ids.append(part.id)
    merged = pa.concat_tables(tables)
    merged = merged.take(np.argsort(merged.column("timestamp").to_numpy(), kind="stable"))
    summary = part_summary(model, merged)  # before the swap: its locks are held briefly
    name, size = part_write(model_id=model_id, bucket=bucket, table=merged)
    logger.info(
        "compaction: model=%s hour=%s parts=%s rows=%s wrote=%s",
        model_id,
        bucket,
        len(found),
        len(merged),
        name,
    )
    with transaction.atomic():
        locked = list(SamplePart.objects.select_for_update().filter(pk__in=old_ids, retired_at__isnull=True))
        if len(locked) != len(old_ids):
            logger.info("compaction: model=%s hour=%s another compactor got there first", model_id, bucket)
            return 0  # the merged file is an orphan now: collect deletes it
        new = SamplePart.objects.create(
            model_id=model_id,
            bucket=bucket,
            name=name,
            rows=len(merged),
            indexed=len(merged),
            size=size,
            created_at=now,
            compacted=True,
            summary=summary,
        )
        logger.info("compaction: model=%s hour=%s swapping to part=%s", model_id, bucket, new.pk)
        moved = _repoint(model_id, old_ids, new.pk, merged.column("sample_id").to_pylist())
        if moved != len(merged):
            raise RuntimeError(f"compaction moved {moved} index rows of {len(merged)}")
        SamplePart.objects.filter(pk__in=old_ids).update(retired_at=now)
    logger.info("compaction: model=%s hour=%s done part=%s", model_id, bucket, new.pk)
    return 1


_REPOINT_SQL = """
UPDATE monitoring_predictionsample s SET part_id = %s, part_row = u.r
FROM unnest(%s::text[], %s::integer[]) AS u(sid, r)
WHERE s.model_id = %s AND s.sample_id = u.sid AND s.part_id = ANY(%s)
"""


def _repoint(model_id: int, old: list[int], new: int, sample_ids: list[str]) -> int:
    """Point the index rows of the merged samples at their row of the merged part."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(_REPOINT_SQL, [new, sample_ids, list(range(len(sample_ids))), model_id, old])
            return int(cursor.rowcount)
    moved = 0
    for row, sample_id in enumerate(sample_ids):
        moved += PredictionSample.objects.filter(
            model_id=model_id, sample_id=sample_id, part_id__in=old
        ).update(part_id=new, part_row=row)
    return moved
