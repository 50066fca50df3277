"""The client against a real gunicorn of the platform on the suite's test database.

The restart here is a short one (the server is down for about 4 s while the client keeps
logging); bench/client.py --restart-seconds 60 does the 60 s restart of the issue.
"""

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from driftwatch_client import Monitor

from core.services import api_token_create
from monitoring.models import GroundTruth, PredictionSample
from registry.models import RegisteredModel
from tests.clients.conftest import CLIENT_SRC
from tests.live import ROOT, child_env, django_database_url, free_port, http, wait_until
from tests.platform.conftest import make_model

pytestmark = pytest.mark.slow


class Gunicorn:
    """The platform's gunicorn on one fixed port, stopped and started again at will."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        from driftwatch.paths import gunicorn_argv

        argv = gunicorn_argv(self.url.split("//")[1], 1, "--log-level", "warning", "--graceful-timeout", "5")
        self.proc = subprocess.Popen(
            argv, cwd=ROOT, env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        wait_until(self._answers, 60, what="gunicorn")

    def _answers(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise RuntimeError(f"gunicorn exited with {self.proc.returncode}")
        try:
            return http("GET", self.url + "/healthz", timeout=5)[0] in (200, 503)
        except OSError:
            return False

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(30)


@pytest.fixture
def churn_live(transactional_db: None) -> RegisteredModel:
    return make_model()


@pytest.fixture
def token(churn_live: RegisteredModel) -> str:
    user = get_user_model().objects.create_user("serving")
    return api_token_create(user=user, scope="ingest", rate_limit_per_minute=0)[1]


@pytest.fixture
def server(churn_live: RegisteredModel) -> Iterator[Gunicorn]:
    web = Gunicorn(child_env(DATABASE_URL=django_database_url()))
    web.start()
    try:
        yield web
    finally:
        web.stop()


def _features(i: int) -> dict[str, Any]:
    return {"age": 20 + i % 50, "income": 1000.0 + i, "city": ["paris", "lyon"][i % 2]}


def _log_pair(monitor: Monitor, i: int) -> None:
    monitor.log_prediction(f"s{i}", _features(i), ["no", "yes"][i % 2], {"no": 0.4, "yes": 0.6})
    monitor.log_label(f"s{i}", ["no", "yes"][i // 2 % 2])


def test_a_server_restart_within_the_queue_bound_loses_and_duplicates_nothing(
    server: Gunicorn, token: str, churn_live: RegisteredModel
) -> None:
    monitor = Monitor(url=server.url, token=token, model="churn", batch_size=50, max_batch_age=0.2,
                      backoff_base=0.1, backoff_max=1.0, max_queue_size=10_000)  # fmt: skip
    n = 900
    restarting = threading.Event()

    def produce() -> None:  # a serving loop: steady traffic, before, during and after the outage
        for i in range(n):
            _log_pair(monitor, i)
            if i == 450:
                restarting.wait(30)
            time.sleep(0.004)

    producer = threading.Thread(target=produce)
    producer.start()
    wait_until(lambda: monitor.stats().sent >= 200, 60, 0.05, "traffic before the restart")
    server.stop()
    down_at = time.monotonic()
    wait_until(lambda: monitor.stats().retried >= 3, 30, 0.05, "retries during the outage")
    time.sleep(max(0.0, 4 - (time.monotonic() - down_at)))
    restarting.set()
    server.start()
    producer.join(60)
    assert monitor.flush(60)
    stats = monitor.stats()
    monitor.close()

    ids = list(PredictionSample.objects.filter(model=churn_live).values_list("sample_id", flat=True))
    assert sorted(ids) == sorted(f"s{i}" for i in range(n))  # every one, each once
    assert GroundTruth.objects.filter(model=churn_live).count() == n
    assert (stats.sent, stats.dropped_total, stats.queued) == (2 * n, 0, 0)
    assert stats.retried >= 3


def test_a_forked_childs_samples_arrive_and_the_parents_are_sent_once(
    server: Gunicorn, token: str, churn_live: RegisteredModel
) -> None:
    script = f"""
        import atexit, json, os, sys
        sys.path.insert(0, {str(CLIENT_SRC)!r})
        from driftwatch_client import Monitor

        def report():  # registered first, so it runs after the monitor's exit-time flush
            s = monitor.stats()
            print(json.dumps({{"who": who, "sent": s.sent, "duplicates": s.duplicates,
                              "dropped": s.dropped_total}}), flush=True)

        who = "parent"
        atexit.register(report)
        monitor = Monitor(url={server.url!r}, token={token!r}, model="churn", max_batch_age=60, exit_timeout=30)
        for i in range(10):  # still queued when the process forks
            monitor.log_prediction(f"parent-{{i}}", {{"age": i, "income": 1.0, "city": "lyon"}}, "yes")
        children = []
        for k in range(2):
            pid = os.fork()
            if pid == 0:  # a prefork worker: logs, then exits normally (atexit flushes)
                who = f"child{{k}}"
                for i in range(20):
                    monitor.log_prediction(f"{{who}}-{{i}}", {{"age": i, "income": 2.0, "city": "paris"}}, "no")
                sys.exit(0)
            children.append(pid)
        for pid in children:
            assert os.waitpid(pid, 0)[1] == 0
    """
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True,
                          text=True, timeout=120, env=dict(os.environ))  # fmt: skip
    assert done.returncode == 0, done.stderr
    reports = {r["who"]: r for r in map(json.loads, done.stdout.splitlines())}
    assert {who: r["sent"] for who, r in reports.items()} == {"parent": 10, "child0": 20, "child1": 20}
    assert sum(r["duplicates"] + r["dropped"] for r in reports.values()) == 0
    ids = set(PredictionSample.objects.filter(model=churn_live).values_list("sample_id", flat=True))
    expected = {f"parent-{i}" for i in range(10)} | {f"child{k}-{i}" for k in range(2) for i in range(20)}
    assert ids == expected


def test_a_row_the_platform_refuses_is_dropped_with_its_message_and_the_rest_stored(
    server: Gunicorn, token: str, churn_live: RegisteredModel
) -> None:
    monitor = Monitor(url=server.url, token=token, model="churn", max_batch_age=60)
    for i in range(5):
        features = _features(i) | ({"age": "old"} if i == 2 else {})
        monitor.log_prediction(f"s{i}", features, "yes")
    assert monitor.flush(30)
    stats = monitor.stats()
    monitor.close()
    ids = sorted(PredictionSample.objects.filter(model=churn_live).values_list("sample_id", flat=True))
    assert ids == ["s0", "s1", "s3", "s4"]
    assert (stats.predictions_sent, stats.dropped["invalid"], stats.dropped_total) == (4, 1, 1)
    assert "features.age" in stats.last_error, stats.last_error
