"""schemathesis against /api/schema/ on a live gunicorn: zero 5xx, zero schema violations.

Every operation, with generated valid and invalid input (coverage, fuzzing and stateful
phases), an admin token and an existing model. Bounded by example count (a couple of minutes
on two cores). The seed is fixed so CI is repeatable; DRIFTWATCH_FUZZ_SEED and
DRIFTWATCH_FUZZ_EXAMPLES widen the search locally.
"""

import os
import subprocess
import sys
from pathlib import Path

from django.contrib.auth import get_user_model

from core.services import api_token_create
from tests.live import child_env, django_database_url, web_server
from tests.platform.conftest import make_model

# Responses must be what the schema says: status codes, content types, headers and bodies.
CHECKS = ",".join(
    [
        "not_a_server_error",
        "status_code_conformance",
        "content_type_conformance",
        "response_headers_conformance",
        "response_schema_conformance",
    ]
)


def test_the_api_gives_no_5xx_and_conforms_to_its_schema(transactional_db: None, tmp_path: Path) -> None:
    make_model()
    token = api_token_create(user=get_user_model().objects.create_user("fuzzer"), scope="admin")[1]
    env = child_env(DATABASE_URL=django_database_url())
    with web_server(env, workers=2) as base:
        command = [
            str(Path(sys.executable).with_name("schemathesis")),
            "run",
            f"{base}/api/schema/",
            "--header",
            f"Authorization: Bearer {token}",
            "--checks",
            CHECKS,
            "--max-examples",
            os.environ.get("DRIFTWATCH_FUZZ_EXAMPLES", "30"),
            "--seed",
            os.environ.get("DRIFTWATCH_FUZZ_SEED", "1"),
            "--workers",
            "2",
            "--request-timeout",
            "60",
            "--no-color",
        ]
        # In a temporary folder: schemathesis keeps a cache of what it found in its working directory.
        done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=900)
    summary = done.stdout[done.stdout.find("SUMMARY") :]
    print(summary)
    assert done.returncode == 0, done.stdout[-20000:] + done.stderr[-2000:]
    assert " passed" in summary and "failures" not in summary
