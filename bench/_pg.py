"""Shared by the benchmarks that need PostgreSQL: a private `<db>_bench` database and Django."""

import os
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlparse, urlunparse

ROOT = Path(__file__).resolve().parents[1]
for path in (str(ROOT), str(ROOT / "platform")):
    if path not in sys.path:
        sys.path.insert(0, path)

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/driftwatch"


def bench_database_url(base: str | None = None, suffix: str = "_bench") -> str:
    parsed = urlparse(base or os.environ.get("DATABASE_URL") or DEFAULT_URL)
    return urlunparse(parsed._replace(path=parsed.path.rstrip("/") + suffix))


def ensure_database(url: str) -> None:
    import psycopg

    parsed = urlparse(url)
    admin = urlunparse(parsed._replace(path="/postgres"))
    with psycopg.connect(admin, autocommit=True) as conn:
        name = parsed.path.lstrip("/")
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname=%s", (name,)).fetchone():
            conn.execute(f'CREATE DATABASE "{name}"')


def drop_database(url: str) -> None:
    """Drop the bench's database, if there: the next ``django_on`` creates and migrates it anew."""
    import psycopg

    parsed = urlparse(url)
    with psycopg.connect(urlunparse(parsed._replace(path="/postgres")), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{parsed.path.lstrip("/")}"')


def django_on(url: str) -> None:
    """Point Django at the bench database, set it up and migrate it."""
    ensure_database(url)
    os.environ["DATABASE_URL"] = url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "driftwatch.settings")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", interactive=False, verbosity=0)


def admin_api_client(username: str) -> Any:
    """A DRF test client carrying a fresh admin token of `username` (after django.setup())."""
    from django.contrib.auth import get_user_model
    from rest_framework.test import APIClient

    from core.services import api_token_create

    user, _ = get_user_model().objects.get_or_create(username=username)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Bearer " + api_token_create(user=user, scope="admin")[1])
    return client


# The sample table as it was before the columnar store (migration monitoring 0031 dropped its JSON
# payload columns): the index table's columns, indexes and identity, with the payload as JSON.
JSON_TABLE = "bench_json_samples"
_JSON_TABLE_SQL = f"""
DROP TABLE IF EXISTS {JSON_TABLE};
CREATE TABLE {JSON_TABLE} (LIKE monitoring_predictionsample INCLUDING ALL);
ALTER TABLE {JSON_TABLE} ADD COLUMN features jsonb NOT NULL, ADD COLUMN probabilities jsonb;
"""


def copy_samples_seconds(model_id: int, samples: list[dict[str, Any]]) -> float:
    """A raw PostgreSQL COPY of ``samples`` (the API's JSON shape) into the JSON sample table of
    before the columnar store (rebuilt as ``JSON_TABLE``, dropped after), under ``model_id``: the
    seconds it took (the rows are built before the clock starts)."""
    import json
    import time
    from datetime import UTC, datetime

    from django.db import connection

    now = datetime.now(UTC)
    rows = [
        (
            model_id,
            s["id"],
            datetime.fromisoformat(s["timestamp"]),
            now,
            json.dumps(s["features"]),
            json.dumps(s["prediction"]),
            json.dumps(s.get("probabilities")),
        )
        for s in samples
    ]
    connection.ensure_connection()
    raw = connection.connection
    with raw.transaction(), raw.cursor() as cursor:
        cursor.execute(_JSON_TABLE_SQL)
    t0 = time.perf_counter()
    with raw.transaction(), raw.cursor() as cursor:
        with cursor.copy(
            f"COPY {JSON_TABLE} (model_id, sample_id, timestamp, received_at, "
            "features, prediction, probabilities) FROM STDIN"
        ) as copy:
            for row in rows:
                copy.write_row(row)
    seconds = time.perf_counter() - t0
    with raw.transaction(), raw.cursor() as cursor:
        cursor.execute(f"DROP TABLE {JSON_TABLE}")
    return seconds
