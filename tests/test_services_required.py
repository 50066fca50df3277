"""With DATABASE_URL / REDIS_URL set, an unreachable service stops the suite with an error:
it must never fall back to the embedded defaults or skip."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    ("variable", "url", "message"),
    [
        ("REDIS_URL", "redis://127.0.0.1:1/0", "Redis is unreachable"),
        ("DATABASE_URL", "postgres://postgres@127.0.0.1:1/driftwatch", "database is unreachable"),
    ],
)
def test_suite_fails_when_a_configured_service_is_down(variable: str, url: str, message: str) -> None:
    env = {**os.environ, variable: url}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/workers/test_task_names.py"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 3, result.stdout[-2000:]
    assert message in result.stdout + result.stderr
