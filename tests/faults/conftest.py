from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture
def media(settings: Any, tmp_path: Path) -> Iterator[Path]:
    """This test's own storage folder (the part files), which the killed child is given too."""
    settings.MEDIA_ROOT = str(tmp_path)
    yield tmp_path
