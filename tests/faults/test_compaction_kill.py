"""kill -9 of a compaction mid-way (its merged file written, or its swap under way): the next
check's window still holds every sample once, and the next compaction and collection finish the
job (one live part, one file)."""

from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from monitoring.models import SamplePart
from monitoring.samples import WindowBounds
from monitoring.store.collect import parts_collect
from monitoring.store.compaction import parts_compact_due
from monitoring.store.source import ColumnarSampleSource
from tests.clock import T0
from tests.live import child_env, django_database_url, manage_killed_when_logged
from tests.platform.monitoring.factories import monitored_model, rows, send

HOUR = timedelta(hours=1)
N_PARTS, PER_PART = 3, 2500
COMPACT = "from monitoring.store.compaction import parts_compact_due; parts_compact_due()"


def _ids() -> list[str]:
    model = SamplePart.objects.first().model  # type: ignore[union-attr]
    loaded = ColumnarSampleSource().load(model=model, window=WindowBounds(T0, T0 + HOUR))
    return list(loaded.arrays["sample_id"])


def _killed_at(line_part: str, media: Path) -> None:
    env = child_env(
        DATABASE_URL=django_database_url(),
        DRIFTWATCH_MEDIA_ROOT=str(media),
        DRIFTWATCH_SAMPLE_SOURCE="columnar",
    )
    manage_killed_when_logged(env, line_part, "shell", "-c", COMPACT)


@pytest.mark.parametrize("kill_at", ["wrote=", "swapping to part"])
def test_a_compaction_killed_mid_way_loses_and_doubles_no_sample(
    transactional_db: None, media: Path, kill_at: str
) -> None:
    model = monitored_model("sea", reference_rows=100)
    for k in range(N_PARTS):
        send(
            model,
            rows(PER_PART, seed=k),
            start=T0 + timedelta(seconds=k),
            prefix=f"p{k}-",
            labelled=False,
            step=timedelta(milliseconds=500),
        )
    assert SamplePart.objects.filter(model=model).count() == N_PARTS
    _killed_at(kill_at, media)
    ids = _ids()
    assert len(ids) == len(set(ids)) == N_PARTS * PER_PART  # the next check's counts
    live = SamplePart.objects.filter(retired_at__isnull=True).count()
    assert live in (1, N_PARTS)  # the old parts, or the swap committed before the kill landed
    parts_compact_due()
    assert SamplePart.objects.filter(retired_at__isnull=True).count() == 1
    parts_collect(now=timezone.now() + 2 * HOUR)
    assert len([p for p in (media / "samples").rglob("*.arrow")]) == 1
    ids = _ids()
    assert len(ids) == len(set(ids)) == N_PARTS * PER_PART
