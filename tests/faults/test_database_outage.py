"""PostgreSQL goes down under a running gunicorn: 503 JSON, then recovery with no restart.

A private cluster on a free port is stopped (immediate shutdown) and started again.
"""

import json
from collections.abc import Iterator

import pytest

from tests.live import PrivatePostgres, child_env, http, manage, needs, wait_until, web_server

MODEL = {
    "name": "churn",
    "task": "classification",
    "classes": ["no", "yes"],
    "features": [{"name": "age", "type": "numerical"}],
}


def _sample(i: int) -> dict[str, object]:
    return {"id": f"s{i}", "features": {"age": i}, "prediction": "yes"}


@pytest.fixture(scope="module")
def postgres() -> Iterator[PrivatePostgres]:
    needs("initdb", "pg_ctl", "redis-server")
    pg = PrivatePostgres()
    try:
        pg.start()
        import psycopg

        with psycopg.connect(pg.url(), autocommit=True) as conn:
            conn.execute("CREATE DATABASE app")
        yield pg
    finally:
        pg.close()


def test_postgres_outage_answers_503_json_and_the_api_recovers_by_itself(postgres: PrivatePostgres) -> None:
    env = child_env(DATABASE_URL=postgres.url("app"))
    manage(env, "migrate", "-v0")
    token = manage(env, "create_api_token", "ops", "--scope", "admin", "--create-user").split()[-1]
    with web_server(env) as base:
        assert http("POST", base + "/api/v1/models", json.dumps(MODEL).encode(), token)[0] == 201
        postgres.stop()
        calls = [
            ("GET", "/api/v1/models", None),
            ("GET", "/api/v1/models/churn/checks", None),
            ("POST", "/api/v1/models/churn/predictions", json.dumps({"samples": [_sample(1)]}).encode()),
        ]
        for method, path, body in calls * 3:  # both gunicorn workers, persistent connections or not
            status, content = http(method, base + path, body, token)
            assert status == 503, (method, path, content[:300])
            assert json.loads(content)["error"] == "database_unavailable"
        status, content = http("GET", base + "/healthz")
        assert status == 503
        assert json.loads(content)["database"] == {"ok": False, "error": "unavailable"}
        assert str(postgres.port) not in content.decode()

        postgres.start()
        predictions = json.dumps({"samples": [_sample(2)]}).encode()
        wait_until(
            lambda: http("POST", base + "/api/v1/models/churn/predictions", predictions, token)[0] == 200,
            30,
            what="recovery",
        )
        assert http("GET", base + "/healthz")[0] == 200
        for _ in range(4):  # every worker's connection has recovered
            assert http("GET", base + "/api/v1/models/churn/checks", None, token)[0] == 200
