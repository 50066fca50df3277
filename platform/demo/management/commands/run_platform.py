"""Runs the whole platform in the foreground: web, worker, beat and (optionally) demo traffic.

Ctrl-C (or SIGTERM) stops the children in order and waits for them.
"""

import os
import signal
import subprocess
import sys
import time
import urllib.request
from argparse import ArgumentParser
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand

from demo.services import demo_seed
from driftwatch.paths import gunicorn_argv
from workers import queues

ROOT = str(settings.BASE_DIR)


def child_environment(*, debug: bool) -> dict[str, str]:
    """The environment of the processes this run starts; --debug changes only theirs."""
    env = dict(os.environ)
    if debug:
        env["DJANGO_DEBUG"] = "1"
    return env


def debug_warning(url: str) -> str:
    return (
        f"  DEBUG is ON for this run only (--debug): error pages show tracebacks and settings "
        f"to anyone who can reach {url}/. Never use it where others can connect."
    )


class Command(BaseCommand):
    help = "Migrate, seed the demo, then run web + worker + beat (+ demo traffic) until Ctrl-C."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--host", default=os.environ.get("HOST", "127.0.0.1"))
        parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
        parser.add_argument("--no-demo", action="store_true", help="no demo model and no demo traffic")
        parser.add_argument("--web-workers", type=int, default=2)
        parser.add_argument(
            "--debug",
            action="store_true",
            help="Django DEBUG on for the processes of this run only (tracebacks in error pages)",
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        self.child_env = child_environment(debug=opts["debug"])
        call_command("migrate", interactive=False, verbosity=0)
        url = f"http://{opts['host']}:{opts['port']}"
        seed = None if opts["no_demo"] else demo_seed()
        children = self._start_services(opts)
        stopping = False

        def stop(signum: int, frame: Any) -> None:
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop)
        if not self._wait_healthy(url, children, lambda: stopping):
            self._stop(children)
            raise SystemExit(1)
        if seed is not None:
            children.append(
                (
                    "demo traffic",
                    self._spawn(
                        [
                            sys.executable,
                            "manage.py",
                            "demo_traffic",
                            "--url",
                            url,
                            "--token",
                            seed.ingest_token,
                            "--read-token",
                            seed.read_token,
                        ]
                    ),
                )
            )
        self._banner(url, seed, debug=opts["debug"])
        while not stopping:
            dead = [name for name, proc in children if proc.poll() is not None]
            if dead:
                self.stderr.write(f"stopped unexpectedly: {', '.join(dead)}; shutting down")
                break
            time.sleep(0.5)
        self._stop(children)

    def _start_services(self, opts: dict[str, Any]) -> list[tuple[str, subprocess.Popen[bytes]]]:
        python = sys.executable
        web = gunicorn_argv(f"{opts['host']}:{opts['port']}", opts["web_workers"], "--access-logfile", "-")
        worker = [
            python,
            "-m",
            "celery",
            "-A",
            "workers.celery_app",
            "worker",
            "-l",
            "info",
            "-Q",
            f"{queues.DEFAULT},{queues.CHECKS}",
            "--concurrency",
            "2",
            "-n",
            "cpu@%h",
        ]
        # Training: its own worker, one job at a time (the memory plan assumes the device is its own).
        trainer = [python, "-m", "celery", "-A", "workers.celery_app", "worker", "-l", "info", "-Q",
                   queues.TRAINING, "--concurrency", "1", "--prefetch-multiplier", "1", "-n", "train@%h"]  # fmt: skip
        beat = [python, "-m", "celery", "-A", "workers.celery_app", "beat", "-l", "info"]
        services = [
            ("web", self._spawn(web)),
            ("worker", self._spawn(worker)),
            ("trainer", self._spawn(trainer)),
            ("beat", self._spawn(beat)),
        ]
        gpu = self._gpu_worker(python)
        if gpu is not None:
            services.append(("gpu worker", self._spawn(gpu)))
        return services

    def _gpu_worker(self, python: str) -> list[str] | None:
        """With DRIFTWATCH_SIMULATED_GPUS set, one worker serving every simulated GPU's queue."""
        from workers.placement import parse_simulated_gpus
        from workers.placement.devices import gpu_host

        devices = parse_simulated_gpus(self.child_env.get("DRIFTWATCH_SIMULATED_GPUS"))
        if not devices:
            return None
        names = ",".join(queues.train_queue(gpu_host(), d.index) for d in devices)
        return [python, "-m", "celery", "-A", "workers.celery_app", "worker", "-l", "info", "-Q", names,
                "--concurrency", str(2 * len(devices)), "--prefetch-multiplier", "1", "-n", "gpu@%h"]  # fmt: skip

    def _spawn(self, cmd: list[str]) -> subprocess.Popen[bytes]:
        # Own session: the terminal's Ctrl-C reaches only us, and we stop children in order.
        return subprocess.Popen(cmd, cwd=ROOT, start_new_session=True, env=self.child_env)

    def _wait_healthy(
        self, url: str, children: list[tuple[str, subprocess.Popen[bytes]]], stopping: Any
    ) -> bool:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not stopping():
            if any(proc.poll() is not None for _, proc in children):
                self.stderr.write("a service failed to start")
                return False
            try:
                with urllib.request.urlopen(f"{url}/healthz", timeout=5) as response:
                    if response.status == 200:
                        return True
            except OSError:
                pass
            time.sleep(1)
        return False

    def _banner(self, url: str, seed: Any, *, debug: bool) -> None:
        lines = ["", f"driftwatch is running at {url}/", f"  API docs: {url}/api/docs/   admin: {url}/admin/"]
        if debug:
            lines.append(debug_warning(url))
        if seed is not None:
            login = seed.admin_password or "(existing password)"
            lines += [f"  login: {seed.admin_username} / {login}", f"  ingest token: {seed.ingest_token}"]
        lines += ["Press Ctrl-C to stop.", ""]
        self.stdout.write("\n".join(lines))
        self.stdout.flush()

    def _stop(self, children: list[tuple[str, subprocess.Popen[bytes]]]) -> None:
        for _, proc in reversed(children):
            if proc.poll() is None:
                # The main process only: celery and gunicorn stop their own children gracefully.
                proc.terminate()
        deadline = time.monotonic() + 20
        for name, proc in reversed(children):
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.stderr.write(f"{name} did not stop in time; killing it")
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        self.stdout.write("driftwatch stopped.")
