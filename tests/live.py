"""Live processes for the fault, schema and load tests: gunicorn, Celery workers, and private
PostgreSQL and Redis servers on free 127.0.0.1 ports in temporary directories (the outages are
theirs; the shared servers are never touched). Everything started here is torn down on exit."""

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PLATFORM = ROOT / "platform"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def needs(*binaries: str) -> None:
    """Skip where a server binary is missing, except in CI (there, a missing one is a failure)."""
    import pytest

    missing = [b for b in binaries if shutil.which(b) is None]
    if missing and os.environ.get("CI"):
        pytest.fail(f"CI lacks {missing}")
    if missing:
        pytest.skip(f"needs {missing} on PATH")


def django_database_url() -> str:
    """The URL of the database the test process uses (the test database), for child processes."""
    from django.db import connection

    s = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{s['NAME']}"
    return f"postgres://{s['USER']}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


def child_env(**overrides: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        DRIFTWATCH_DEBUG="0",
        SECRET_KEY="live-" + uuid.uuid4().hex + uuid.uuid4().hex,
        PYTHONUNBUFFERED="1",
    )
    env.update(overrides)
    if not env.get("REDIS_URL"):
        env.pop("REDIS_URL", None)
    return env


def server_env() -> dict[str, str]:
    """The environment for server binaries (redis-server, PostgreSQL): this one without libfaketime,
    which redis-server cannot start under (its allocator's clock calls recurse). Their clocks hold
    no date the tests read; the Python children (gunicorn, Celery) keep libfaketime, so a run moved
    by `faketime` (.ci/run) moves them with it."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("FAKETIME")}
    kept = [lib for lib in re.split(r"[:\s]+", env.pop("LD_PRELOAD", "")) if lib and "faketime" not in lib]
    if kept:
        env["LD_PRELOAD"] = " ".join(kept)
    return env


def http(
    method: str, url: str, body: bytes | None = None, token: str = "", timeout: float = 30
) -> tuple[int, bytes]:
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url, data=body, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def wait_until(predicate, timeout: float, interval: float = 0.2, what: str = "condition") -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise TimeoutError(f"{what} not reached within {timeout} s")


def _stop(proc: subprocess.Popen[bytes], grace: float = 20) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


@contextmanager
def web_server(env: dict[str, str], workers: int = 2, log: Path | None = None) -> Iterator[str]:
    """gunicorn on a free port; yields its base URL once /healthz answers (whatever it says)."""
    from driftwatch.paths import gunicorn_argv

    port = free_port()
    out = open(log, "ab") if log else subprocess.DEVNULL  # noqa: SIM115
    proc = subprocess.Popen(
        gunicorn_argv(f"127.0.0.1:{port}", workers, "--log-level", "warning", "--graceful-timeout", "5"),
        cwd=ROOT,
        env=env,
        stdout=out,
        stderr=out,
    )
    base = f"http://127.0.0.1:{port}"

    def up() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"gunicorn exited with {proc.returncode}")
        try:
            return http("GET", base + "/healthz", timeout=5)[0] in (200, 503)
        except OSError:
            return False

    try:
        wait_until(up, 60, what="gunicorn")
        yield base
    finally:
        _stop(proc)
        if log:
            out.close()  # type: ignore[union-attr]


@contextmanager
def celery_worker(
    env: dict[str, str], queues: str = "default,checks", concurrency: int = 1, log: Path | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    """A real prefork worker process (its children run the tasks)."""
    out = open(log, "ab") if log else subprocess.DEVNULL  # noqa: SIM115
    cmd = [
        sys.executable, "-m", "celery", "-A", "workers.celery_app", "worker",
        "-Q", queues, "-c", str(concurrency), "--pool", "prefork",
        "-n", f"live-{uuid.uuid4().hex[:8]}@%h",
        "--without-gossip", "--without-mingle", "--without-heartbeat", "-l", "info",
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=out)
    try:
        yield proc
    finally:
        _stop(proc, grace=30)
        if log:
            out.close()  # type: ignore[union-attr]


def worker_children(worker: subprocess.Popen[bytes]) -> list[int]:
    path = Path(f"/proc/{worker.pid}/task/{worker.pid}/children")
    return [int(pid) for pid in path.read_text().split()] if path.exists() else []


def manage(env: dict[str, str], *args: str, timeout: float = 300) -> str:
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if done.returncode != 0:
        raise RuntimeError(f"manage.py {args} failed:\n{done.stdout}\n{done.stderr}")
    return done.stdout


class PrivateRedis:
    """redis-server on a free 127.0.0.1 port, no persistence; kill() and start() it at will."""

    def __init__(self) -> None:
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="driftwatch-redis-")
        self.proc: subprocess.Popen[bytes] | None = None

    def url(self, db: int = 0) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                self.dir,
            ],  # fmt: skip
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=server_env(),
        )
        wait_until(self._answers, 60, what="private redis")

    def _answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def close(self) -> None:
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


class PrivatePostgres:
    """A throwaway cluster (initdb) on a free 127.0.0.1 port; stop() is an immediate shutdown."""

    def __init__(self) -> None:
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="driftwatch-pg-"))
        self.data = self.dir / "data"
        self.as_user: list[str] = []
        if os.geteuid() == 0:  # initdb refuses to run as root
            shutil.chown(self.dir, "postgres")
            self.as_user = ["runuser", "-u", "postgres", "--"]
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8")

    def url(self, name: str = "postgres") -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{name}"

    def _run(self, *argv: str) -> None:
        subprocess.run([*self.as_user, *argv], check=True, capture_output=True, timeout=120, env=server_env())

    def start(self) -> None:
        options = f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.dir} -c fsync=off"
        self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.dir / "log"), "-w", "start")

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")

    def close(self) -> None:
        subprocess.run(
            [*self.as_user, "pg_ctl", "-D", str(self.data), "-m", "immediate", "stop"],
            capture_output=True,
            env=server_env(),
        )
        shutil.rmtree(self.dir, ignore_errors=True)


def manage_killed_when_logged(env: dict[str, str], line_part: str, *args: str) -> None:
    """Run ``manage.py <args>`` and kill -9 it as soon as its log (stderr) shows ``line_part``:
    a fault test's crash at a chosen point. Fails if the command never logs it."""
    import pytest

    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "manage.py"), *args],
        env=env,
        cwd=ROOT,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stderr is not None
    try:
        for line in proc.stderr:
            if line_part in line:
                proc.send_signal(signal.SIGKILL)
                break
        else:
            pytest.fail(f"manage.py {' '.join(args)} never logged {line_part!r}")
    finally:
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
