"""A real gunicorn with two workers: counters summed across workers, a recycled worker's files
folded into the totals and removed."""

import json
import os
import signal
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model

from core.services import api_token_create
from tests.live import child_env, django_database_url, http, wait_until, web_server
from tests.platform.conftest import make_model
from tests.platform.observability.scrape import value

pytestmark = pytest.mark.slow
ACCEPTED = "driftwatch_ingest_accepted_rows_total"


def token(scope: str) -> str:
    user, _ = get_user_model().objects.get_or_create(username=f"live-{scope}")
    return api_token_create(user=user, scope=scope)[1]


def worker_pids(folder: Path) -> set[int]:
    return {
        int(p.stem.split("_")[-1]) for p in folder.glob("counter_*.db") if p.stem.split("_")[-1].isdigit()
    }


def post_samples(base: str, secret: str, ids: range) -> None:
    def one(i: int) -> int:
        sample = {"id": f"s{i}", "features": {"age": 1, "income": 2.0, "city": "paris"}, "prediction": "no"}
        body = json.dumps({"samples": [sample]}).encode()
        return http("POST", f"{base}/api/v1/models/churn/predictions", body, token=secret)[0]

    with ThreadPoolExecutor(8) as pool:
        assert set(pool.map(one, ids)) == {200}


def test_counters_are_summed_across_workers_and_a_recycled_workers_files_are_folded(
    transactional_db: None, tmp_path: Path
) -> None:
    make_model()
    ingest, read = token("ingest"), token("read")
    folder = tmp_path / "prometheus"
    env = child_env(DATABASE_URL=django_database_url(), PROMETHEUS_MULTIPROC_DIR=str(folder))
    with web_server(env, workers=2, log=tmp_path / "gunicorn.log") as base:
        sent = 0
        while len(worker_pids(folder)) < 2 and sent < 400:  # the kernel picks who accepts
            post_samples(base, ingest, range(sent, sent + 40))
            sent += 40
        pids = worker_pids(folder)
        assert len(pids) == 2, f"one worker took all {sent} requests"

        def accepted() -> float:
            status, body = http("GET", f"{base}/metrics", token=read)
            assert status == 200, body
            return value(body.decode(), ACCEPTED, model="churn", kind="predictions")

        assert accepted() == sent

        recycled = min(pids)
        os.kill(recycled, signal.SIGTERM)  # as a max-requests recycle ends it
        wait_until(lambda: not (folder / f"counter_{recycled}.db").exists(), 30, what="dead worker folded")
        assert (folder / "counter_archive.db").exists()
        assert recycled not in worker_pids(folder)
        assert accepted() == sent  # nothing lost, nothing counted twice

        post_samples(base, ingest, range(sent, sent + 40))
        assert accepted() == sent + 40
