"""Statements whose parameters PostgreSQL binds: psycopg's own cursor on Django's connection."""

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import orjson
from django.db import connection


@contextmanager
def server_cursor() -> Iterator[Any]:
    """A psycopg cursor on Django's connection (its transaction) whose parameters the server
    binds (Django's cursor binds them on the client, quoting an array into the SQL) and whose
    JSON values orjson reads (json.loads took 0.3 s more for 100,000 labels). PostgreSQL only:
    the SQLite default never loads the driver."""
    import psycopg
    from psycopg.types.json import set_json_loads

    connection.ensure_connection()
    with psycopg.Cursor(connection.connection) as cursor:
        set_json_loads(orjson.loads, cursor)
        yield cursor
