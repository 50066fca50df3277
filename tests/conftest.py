"""Shared fixtures. When DATABASE_URL / REDIS_URL are set (CI), they must be reachable:
the suite stops with an error instead of silently falling back to the embedded defaults."""

import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor


def pytest_sessionstart(session: pytest.Session) -> None:
    if os.environ.get("REDIS_URL"):
        import redis

        try:
            redis.Redis.from_url(os.environ["REDIS_URL"], socket_connect_timeout=3).ping()
        except Exception as exc:
            pytest.exit(f"REDIS_URL is set but Redis is unreachable: {exc}", returncode=3)
    if os.environ.get("DATABASE_URL"):
        import psycopg

        try:
            psycopg.connect(os.environ["DATABASE_URL"], connect_timeout=3).close()
        except Exception as exc:
            pytest.exit(f"DATABASE_URL is set but the database is unreachable: {exc}", returncode=3)


@pytest.fixture
def allow_recipe_modules() -> Iterator[Callable[..., None]]:
    """allow_recipe_modules("tests.x") → those modules' factories may be built, for this test only
    (as an operator's DRIFTWATCH_RECIPE_MODULES would allow them)."""
    from workers.training import recipes

    previous = recipes.allowed_recipe_modules() - recipes.BUILTIN_MODULES
    yield lambda *names: recipes.allow_recipe_modules(names)
    recipes.allow_recipe_modules(previous)


@pytest.fixture
def private_webhooks_allowed(settings: Any) -> None:
    """Webhook receivers on 127.0.0.1 (the tests' own) are reachable, as with
    DRIFTWATCH_WEBHOOK_ALLOW_PRIVATE=1; by default they are refused."""
    settings.DRIFTWATCH_WEBHOOK_ALLOW_PRIVATE = True


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
