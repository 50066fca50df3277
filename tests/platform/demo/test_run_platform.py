"""`make run` as a newcomer starts it (embedded SQLite + filesystem broker, a temporary var/):
a console that keeps its banner in view, logs in var/log/, and a prompt stop on SIGINT sent to
the `make` process alone, which GNU make does not forward to its recipe."""

import os
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.live import ROOT, free_port, wait_until

BANNER_END = "Press Ctrl-C to stop."
STATUS_EVERY = 2.5
CONSOLE_WINDOW = 10  # seconds of console read after the banner: four status lines
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


@dataclass
class Run:
    make: subprocess.Popen[bytes]
    var_dir: Path
    port: int
    lines: list[tuple[float, str]] = field(default_factory=list)

    def after(self, start: float) -> list[str]:
        return [line for at, line in self.lines if at > start]

    def banner_seen_at(self) -> float | None:
        return next((at for at, line in self.lines if line == BANNER_END), None)


def descendants(pid: int) -> set[int]:
    """Every live process below `pid` (by parent pid, read from /proc)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"  # a zombie has stopped; only its parent's wait is missing


def port_free(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0


def read_console(run: Run) -> None:
    assert run.make.stdout is not None
    for raw in iter(run.make.stdout.readline, b""):
        run.lines.append((time.monotonic(), raw.decode("utf-8", "replace").rstrip("\n")))


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    var_dir = tmp_path_factory.mktemp("var")
    port = free_port()
    # The embedded default, as a newcomer runs it; and not a sub-make of a `make test` around us.
    unset = ("DATABASE_URL", "REDIS_URL", "DRIFTWATCH_DEBUG", "MAKEFLAGS", "MAKELEVEL", "MFLAGS")
    env = {k: v for k, v in os.environ.items() if k not in unset}
    env.update(DRIFTWATCH_VAR_DIR=str(var_dir), DRIFTWATCH_PORT=str(port))
    # -o: the venv is installed already; make must not try to reinstall it here.
    make = subprocess.Popen(
        ["make", "-o", ".venv/.installed", "run", f"RUN_ARGS=--status-every {STATUS_EVERY}"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own group: the test's signals go to the make pid alone
        # As from a terminal: a runner started in the background ignores SIGINT, and make would
        # inherit that and never see the signal this test sends.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # noqa: PLW1509
    )
    started = Run(make, var_dir, port)
    threading.Thread(target=read_console, args=(started,), daemon=True).start()
    try:
        wait_until(
            lambda: started.banner_seen_at() is not None or make.poll() is not None, 300, what="banner"
        )
        assert started.banner_seen_at() is not None, "\n".join(line for _, line in started.lines)
        yield started
    finally:
        if make.poll() is None:
            os.killpg(make.pid, signal.SIGKILL)
            for pid in descendants(make.pid):
                os.kill(pid, signal.SIGKILL)
        make.wait(30)


def test_banner_names_the_url_the_login_and_where_the_logs_are(run: Run) -> None:
    console = "\n".join(line for _, line in run.lines)
    assert f"driftwatch is running at http://127.0.0.1:{run.port}/" in console
    assert "login: admin / " in console and "ingest token: dw_" in console
    assert f"logs: {run.var_dir}/log/" in console


def test_banner_is_kept_in_a_private_file(run: Run) -> None:
    banner = run.var_dir / "run_banner.txt"
    assert f"http://127.0.0.1:{run.port}/" in banner.read_text() and BANNER_END in banner.read_text()
    assert stat.S_IMODE(banner.stat().st_mode) == 0o600


def test_console_after_the_banner_shows_status_lines_not_access_logs(run: Run) -> None:
    banner_at = run.banner_seen_at()
    assert banner_at is not None
    time.sleep(max(0.0, banner_at + CONSOLE_WINDOW - time.monotonic()))
    after = run.after(banner_at)
    assert len(after) < 8, after  # four status lines; the old console printed ~10 in 10 s
    assert not [line for line in after if '"GET ' in line or '"POST ' in line], after
    statuses = [line for line in after if " · checks " in line]
    assert len(statuses) >= 2, after
    assert "samples" in statuses[-1] and "alerts" in statuses[-1]


def test_children_write_their_output_to_var_log(run: Run) -> None:
    log_dir = run.var_dir / "log"
    wait_until(
        lambda: "ingested batch 1" in (log_dir / "demo-traffic.log").read_text(), 60, what="a demo batch"
    )
    assert "POST /api/v1/models/demo-churn/predictions" in (log_dir / "web.log").read_text()
    assert "ready" in (log_dir / "worker.log").read_text()
    assert "beat: Starting" in (log_dir / "beat.log").read_text()


def test_sigint_to_make_alone_stops_every_child_within_five_seconds(run: Run) -> None:
    children = descendants(run.make.pid)
    assert len(children) >= 6, children  # run_platform, web, worker, trainer, beat, demo traffic, …
    os.kill(run.make.pid, signal.SIGINT)
    sent = time.monotonic()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(alive(pid) for pid in children):
        time.sleep(0.1)
    left = {
        pid: Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ") for pid in children if alive(pid)
    }
    assert not left, "\n".join(f"{at - sent:.2f} {line}" for at, line in run.lines[-5:])
    assert port_free(run.port)
    run.make.wait(10)
    wait_until(lambda: any(line == "driftwatch stopped." for _, line in run.lines), 5, what="stopped line")
