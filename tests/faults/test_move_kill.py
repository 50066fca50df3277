"""kill -9 of ``samples_to_columnar`` mid-way (a batch's parts written, or a batch repointed):
no sample is in zero or two parts, the rows not moved are still there to move, and a second run
and the collection finish the job (every sample once, no orphan file)."""

import io
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.utils import timezone

from monitoring.models import PredictionSample, SamplePart
from monitoring.samples import WindowBounds
from monitoring.store.collect import parts_collect
from monitoring.store.migrate import store_counts
from monitoring.store.source import ColumnarSampleSource
from registry.models import RegisteredModel
from tests.clock import T0
from tests.live import child_env, django_database_url, manage_killed_when_logged
from tests.platform.monitoring.factories import json_rows_send, monitored_model, rows

HOUR = timedelta(hours=1)
N, BATCH = 3000, 500  # 6 batches, over 2 hours


def _killed_at(line_part: str, media: Path) -> None:
    env = child_env(DATABASE_URL=django_database_url(), DRIFTWATCH_MEDIA_ROOT=str(media))
    manage_killed_when_logged(env, line_part, "samples_to_columnar", "--batch", str(BATCH))


def _ids(model: RegisteredModel) -> list[str]:
    loaded = ColumnarSampleSource().load(model=model, window=WindowBounds(T0, T0 + 3 * HOUR))
    return list(loaded.arrays["sample_id"])


@pytest.mark.parametrize("kill_at", ["wrote=", "repointed="])
def test_a_move_killed_mid_way_loses_and_doubles_no_sample(
    transactional_db: None, media: Path, migrate: Any, kill_at: str
) -> None:
    migrate([("monitoring", "0030_sample_payload_nullable")])  # the JSON columns, as before the move
    model = monitored_model("sea", reference_rows=100)
    json_rows_send(model, rows(N, seed=2), start=T0, prefix="old", step=timedelta(seconds=2))
    _killed_at(kill_at, media)
    counts = store_counts(model=model)
    assert counts.consistent, "every moved sample is in exactly one part"
    assert counts.indexed + counts.unmoved == N and counts.unmoved > 0
    out = io.StringIO()
    call_command("samples_to_columnar", "--batch", str(BATCH), stdout=out)
    assert f"sea: moved {counts.unmoved}; index {N}, in parts {N}, left 0" in out.getvalue()
    parts_collect(now=timezone.now() + 2 * HOUR)  # the killed batch's files, if it wrote any
    files = {str(p.relative_to(media)) for p in (media / "samples").rglob("*.arrow")}
    assert files == set(SamplePart.objects.values_list("name", flat=True))
    ids = _ids(model)
    assert len(ids) == len(set(ids)) == N
    assert not PredictionSample.objects.filter(part__isnull=True).exists()
