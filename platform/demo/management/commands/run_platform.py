"""Runs the whole platform in the foreground: web, worker, beat and (optionally) demo traffic.

The terminal shows the banner (also written to var/run_banner.txt), a status line every
`--status-every` seconds, and the children's warnings and errors; their full output goes to
var/log/<name>.log. Ctrl-C, SIGTERM, or the parent going away (make sent SIGINT alone) stops
every child within a few seconds (see demo/supervisor.py).
"""

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from argparse import ArgumentParser
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand
from django.db import DatabaseError
from django.utils import timezone

from demo.console import Console
from demo.services import DemoSeed
from demo.status import PlatformStatus, platform_status, status_line
from demo.supervisor import Child, ParentWatch, StopFlag, child_start, children_stop, log_path
from driftwatch.env import env_int, env_str
from driftwatch.paths import gunicorn_argv
from workers import queues
from workers.placement import parse_simulated_gpus
from workers.placement.devices import gpu_host

ROOT = str(settings.BASE_DIR)
LOG_TAIL_LINES = 15  # shown when a child dies, so a silent crash still says why


def child_environment(*, debug: bool) -> dict[str, str]:
    """The environment of the processes this run starts; --debug changes only theirs."""
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"  # their logs reach the files and the console as they happen
    if debug:
        env["DRIFTWATCH_DEBUG"] = "1"
    return env


def debug_warning(url: str) -> str:
    return (
        f"  DEBUG is ON for this run only (--debug): error pages show tracebacks and settings "
        f"to anyone who can reach {url}/. Never use it where others can connect."
    )


def shown_path(path: Path) -> str:
    """A path as the user would type it: relative to the current folder when inside it."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def banner_lines(
    url: str, seed: DemoSeed | None, *, debug: bool, log_dir: Path, status_every: float
) -> list[str]:
    lines = [f"driftwatch is running at {url}/", f"  API docs: {url}/api/docs/   admin: {url}/admin/"]
    if debug:
        lines.append(debug_warning(url))
    if seed is not None:
        login = seed.admin_password or "(existing password)"
        lines += [f"  login: {seed.admin_username} / {login}", f"  ingest token: {seed.ingest_token}"]
        if seed.read_token:
            lines.append(f"  read token: {seed.read_token}")
    lines += [
        f"  logs: {shown_path(log_dir)}/<web|worker|trainer|beat|demo-traffic>.log"
        " (warnings and errors also show here)",
        f"  this banner: {shown_path(banner_path())}; a status line every {status_every:g} s",
        "Press Ctrl-C to stop.",
    ]
    return lines


def banner_path() -> Path:
    return Path(settings.VAR_DIR) / "run_banner.txt"


def banner_write(lines: list[str]) -> None:
    """Kept in a file so that it can be found again once the terminal has scrolled (0600: it
    holds a password and tokens)."""
    path = banner_path()
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write("\n".join(lines) + "\n")


class Command(BaseCommand):
    help = "Migrate, seed the demo, then run web + worker + beat (+ demo traffic) until Ctrl-C."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--host", default=env_str("DRIFTWATCH_HOST", "127.0.0.1"))
        parser.add_argument("--port", type=int, default=env_int("DRIFTWATCH_PORT", 8000, low=1, high=65535))
        parser.add_argument("--no-demo", action="store_true", help="no demo model and no demo traffic")
        parser.add_argument("--web-workers", type=int, default=2)
        parser.add_argument("--status-every", type=float, default=30.0, help="seconds between status lines")
        parser.add_argument(
            "--debug",
            action="store_true",
            help="Django DEBUG on for the processes of this run only (tracebacks in error pages)",
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        self.parent, self.stop_flag = ParentWatch(), StopFlag()
        self.console = Console(self.stdout)
        self.child_env = child_environment(debug=opts["debug"])
        self.log_dir = Path(settings.VAR_DIR) / "log"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        call_command("migrate", interactive=False, verbosity=0)
        url = f"http://{opts['host']}:{opts['port']}"
        seed = None if opts["no_demo"] else self._seed()
        children = self._start_services(opts)
        if not self._wait_healthy(url, children):
            self._stop(children)
            raise SystemExit(1)
        if seed is not None:
            children.append(self._start("demo traffic", self._traffic_argv(url, seed)))
        lines = banner_lines(
            url, seed, debug=opts["debug"], log_dir=self.log_dir, status_every=opts["status_every"]
        )
        banner_write(lines)
        self.console.say("\n" + "\n".join(lines) + "\n")
        self._supervise(children, opts["status_every"])
        self._stop(children)
        # Nothing is left to clean up, and tearing down an interpreter holding ~2,400 modules
        # takes 1.5 s more on a loaded machine (measured): the run ends when its children have.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)

    def _stopping(self) -> bool:
        return self.stop_flag() or self.parent.parent_leaving()

    def _seed(self) -> DemoSeed:
        """Seeded in a child process: training the demo model loads torch, whose C++ teardown
        holds a process for seconds at exit (3.5 s measured), and this one must exit promptly."""
        argv = [sys.executable, "manage.py", "seed_demo", "--json"]
        done = subprocess.run(argv, cwd=ROOT, env=self.child_env, capture_output=True, text=True, check=False)
        log = log_path(self.log_dir, "seed")
        log.write_text(done.stdout + done.stderr)
        if done.returncode != 0:
            self.console.say(f"seeding the demo failed; the end of {shown_path(log)}:")
            self.console.say("\n".join(done.stderr.splitlines()[-LOG_TAIL_LINES:]))
            raise SystemExit(1)
        return DemoSeed(**json.loads(done.stdout.splitlines()[-1]))

    def _start(self, name: str, argv: list[str], stop_signal: signal.Signals = signal.SIGTERM) -> Child:
        return child_start(
            name, argv, cwd=ROOT, env=self.child_env, log_dir=self.log_dir, console=self.console,
            stop_signal=stop_signal,
        )  # fmt: skip

    def _start_services(self, opts: dict[str, Any]) -> list[Child]:
        python = sys.executable
        # gunicorn 27 waits out the graceful timeout (30 s by default) even once its workers are gone.
        web = gunicorn_argv(f"{opts['host']}:{opts['port']}", opts["web_workers"], "--access-logfile", "-",
                            "--graceful-timeout", "2")  # fmt: skip
        worker = [python, "-m", "celery", "-A", "workers.celery_app", "worker", "-l", "info", "-Q",
                  f"{queues.DEFAULT},{queues.CHECKS}", "--concurrency", "2", "-n", "cpu@%h"]  # fmt: skip
        # Training: its own worker, one job at a time (the memory plan assumes the device is its own).
        trainer = [python, "-m", "celery", "-A", "workers.celery_app", "worker", "-l", "info", "-Q",
                   queues.TRAINING, "--concurrency", "1", "--prefetch-multiplier", "1", "-n", "train@%h"]  # fmt: skip
        beat = [python, "-m", "celery", "-A", "workers.celery_app", "beat", "-l", "info"]
        services = [
            self._start("web", web, signal.SIGINT),  # gunicorn's quick shutdown
            self._start("worker", worker, signal.SIGQUIT),  # Celery's cold shutdown
            self._start("trainer", trainer, signal.SIGQUIT),
            self._start("beat", beat),
        ]
        gpu = self._gpu_worker(python)
        if gpu is not None:
            services.append(self._start("gpu worker", gpu, signal.SIGQUIT))
        return services

    def _gpu_worker(self, python: str) -> list[str] | None:
        """With DRIFTWATCH_SIMULATED_GPUS set, one worker serving every simulated GPU's queue."""
        devices = parse_simulated_gpus(self.child_env.get("DRIFTWATCH_SIMULATED_GPUS"))
        if not devices:
            return None
        names = ",".join(queues.train_queue(gpu_host(), d.index) for d in devices)
        return [python, "-m", "celery", "-A", "workers.celery_app", "worker", "-l", "info", "-Q", names,
                "--concurrency", str(2 * len(devices)), "--prefetch-multiplier", "1", "-n", "gpu@%h"]  # fmt: skip

    @staticmethod
    def _traffic_argv(url: str, seed: DemoSeed) -> list[str]:
        return [sys.executable, "manage.py", "demo_traffic", "--url", url, "--token", seed.ingest_token,
                "--read-token", seed.read_token]  # fmt: skip

    def _wait_healthy(self, url: str, children: list[Child]) -> bool:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not self._stopping():
            failed = [child for child in children if not child.running()]
            if failed:
                self._report_dead(failed, "failed to start")
                return False
            try:
                with urllib.request.urlopen(f"{url}/healthz", timeout=5) as response:
                    if response.status == 200:
                        return True
            except OSError:
                pass
            time.sleep(1)
        return False

    def _supervise(self, children: list[Child], every: float) -> None:
        """Until asked to stop or a child dies: a status line every `every` seconds."""
        before: PlatformStatus | None = None
        next_status = time.monotonic() + every
        while not self._stopping():
            dead = [child for child in children if not child.running()]
            if dead:
                self._report_dead(dead, "stopped unexpectedly")
                return
            if time.monotonic() >= next_status:
                before = self._status(before)
                next_status += every
            time.sleep(0.5)

    def _status(self, before: PlatformStatus | None) -> PlatformStatus | None:
        try:
            now = platform_status()
        except DatabaseError as exc:  # a busy SQLite or a PostgreSQL outage: say so, keep running
            self.console.say(f"{timezone.now():%H:%M:%S}  status unavailable: {exc}")
            return before
        self.console.say(status_line(timezone.localtime(), now, before))
        return now

    def _report_dead(self, dead: list[Child], what: str) -> None:
        for child in dead:
            child.pump.join(timeout=2)  # its last lines are in the file before we read them
            path = log_path(self.log_dir, child.name)
            tail = path.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
            self.console.say(
                f"{child.name} {what} (exit {child.proc.returncode}); the end of {shown_path(path)}:"
            )
            self.console.say("\n".join(f"  {line}" for line in tail))
        self.console.say("shutting down")

    def _stop(self, children: list[Child]) -> None:
        self.console.say("stopping…")
        killed = children_stop(children)
        if killed:
            self.console.say(f"killed after the grace period: {', '.join(killed)}")
        self.console.say("driftwatch stopped.")
