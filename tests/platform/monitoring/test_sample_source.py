"""Windows come from the configured sample source: a source registered here (columns held in
memory, no PredictionSample row at all) feeds a whole check; the columnar one reads only the
features asked for; an unknown source is a configuration error, and the retired relational one
says what to do instead."""

from collections.abc import Iterator, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings
from django.utils import timezone

from monitoring.checks import quality_check_run
from monitoring.models import CheckState, PredictionSample
from monitoring.samples import SampleColumns, WindowBounds, register_sample_source, sample_source
from monitoring.store.source import ColumnarSampleSource
from monitoring.window import range_window, window_load
from registry.models import RegisteredModel
from registry.reference import LABEL, PREDICTION, PROBA_PREFIX
from tests.platform.monitoring.factories import monitored_model, rows

pytestmark = pytest.mark.django_db


def _hour() -> datetime:
    return timezone.now().replace(minute=0, second=0, microsecond=0)


def _columns(data: list[dict[str, Any]], start: datetime) -> dict[str, Any]:
    """The factories' rows as the columns a columnar store would hand over."""
    times = pd.DatetimeIndex([start + timedelta(seconds=i) for i in range(len(data))]).tz_convert("UTC")
    out: dict[str, Any] = {
        name: np.array([r["features"][name] for r in data], dtype=dtype)
        for name, dtype in (("x1", "float64"), ("x2", "float64"), ("segment", object))
    }
    out[PREDICTION] = np.array([r["prediction"] for r in data], dtype=object)
    out[LABEL] = np.array([r["label"] for r in data], dtype=object)
    for cls in ("0", "1"):
        out[PROBA_PREFIX + cls] = np.array([r["probabilities"][cls] for r in data], dtype="float64")
    out["sample_id"] = np.array([f"m{i}" for i in range(len(data))], dtype=object)
    out["version_id"] = np.full(len(data), np.nan)
    out["timestamp"] = times.array
    out["label_received_at"] = (times + timedelta(minutes=5)).array
    return out


class MemorySource:
    """A toy columnar store: fixed arrays, masked to the window's time range."""

    held: dict[str, Any] = {}

    def load(
        self, *, model: RegisteredModel, window: WindowBounds, columns: Sequence[str] | None = None
    ) -> SampleColumns:
        times = pd.DatetimeIndex(self.held["timestamp"])
        keep = np.asarray(times < window.end) & (np.asarray(times >= window.start) if window.start else True)
        return SampleColumns({name: values[keep] for name, values in self.held.items()})


@pytest.fixture
def memory() -> Iterator[type[MemorySource]]:
    register_sample_source("memory", MemorySource)
    with override_settings(DRIFTWATCH_SAMPLE_SOURCE="memory"):
        yield MemorySource


def test_a_registered_source_feeds_a_whole_check(memory: type[MemorySource]) -> None:
    model = monitored_model("sea", reference_rows=1000, min_samples=100, min_labels=100)
    start = _hour() - timedelta(hours=1)
    memory.held = _columns(rows(400, seed=3, shift=1.5, flip=0.4), start)
    check = quality_check_run(model_id=model.pk, window=range_window(start, start + timedelta(hours=1)))
    assert check is not None and check.state == CheckState.DONE
    assert not PredictionSample.objects.exists()  # every sample came from the source
    assert (check.n_samples, check.n_labelled) == (400, 400)
    assert check.drift["columns"]["x1"]["drifted"] is True
    assert check.labels["label_delay_median_s"] == 300.0


def test_window_load_masks_the_source_to_its_range(memory: type[MemorySource]) -> None:
    model = monitored_model("sea", reference_rows=200)
    start = _hour() - timedelta(hours=1)
    memory.held = _columns(rows(100, seed=2), start)
    window = window_load(model=model, start=start, end=start + timedelta(seconds=40))
    assert len(window.frame) == 40 and window.frame["timestamp"].max() < start + timedelta(seconds=40)
    assert str(window.frame["timestamp"].dtype) == "datetime64[ns, UTC]"


def test_asking_the_columnar_source_for_an_unknown_feature_is_an_error(columnar: Path) -> None:
    model = monitored_model("sea", reference_rows=200)
    with pytest.raises(ValueError, match="not features of 'sea'"):
        ColumnarSampleSource().load(model=model, window=WindowBounds(None, _hour()), columns=["nope"])


def test_an_unknown_sample_source_is_a_configuration_error() -> None:
    with override_settings(DRIFTWATCH_SAMPLE_SOURCE="parquet-someday"):
        with pytest.raises(ImproperlyConfigured, match="parquet-someday"):
            sample_source()


def test_the_retired_relational_source_names_the_command_and_the_migration() -> None:
    with override_settings(DRIFTWATCH_SAMPLE_SOURCE="relational"):
        with pytest.raises(ImproperlyConfigured, match="0031.*samples_to_columnar"):
            sample_source()
