"""Fixtures shared by the monitoring tests."""

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor


@pytest.fixture
def columnar(settings: Any, tmp_path: Path) -> Iterator[Path]:
    """The columnar sample store, its parts in a folder of the test's own."""
    settings.MEDIA_ROOT = str(tmp_path)
    settings.DRIFTWATCH_SAMPLE_SOURCE = "columnar"
    yield tmp_path


@pytest.fixture
def migrate() -> Iterator[Callable[[list[tuple[str, str]]], Any]]:
    """migrate(target) → the models as they were at that migration; the schema is back at the
    latest after the test, whatever it asserted."""

    def to(target: list[tuple[str, str]]) -> Any:
        executor = MigrationExecutor(connection)
        executor.migrate(target)
        return executor.loader.project_state(target).apps

    yield to
    # Samples a test stored at an older schema have no part: 0031 would refuse to drop their JSON
    # columns. The test's rows go anyway (its transaction=True database is flushed after it).
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM monitoring_predictionsample WHERE part_id IS NULL")
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())
