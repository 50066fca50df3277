"""Fixtures shared by the monitoring tests."""

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture
def columnar(settings: Any, tmp_path: Path) -> Iterator[Path]:
    """The columnar sample store, its parts in a folder of the test's own."""
    settings.MEDIA_ROOT = str(tmp_path)
    settings.DRIFTWATCH_SAMPLE_SOURCE = "columnar"
    yield tmp_path
