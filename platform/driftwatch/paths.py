"""Puts the project's import roots on sys.path for every entry point (wsgi, asgi, celery)."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PLATFORM_DIR = ROOT / "platform"


def ensure_import_paths() -> None:
    """Make `driftwatch`, the apps and `workers` importable without shadowing stdlib `platform`."""
    for path in (str(ROOT), str(PLATFORM_DIR)):
        if path not in sys.path:
            sys.path.insert(0, path)


def gunicorn_argv(bind: str, workers: int, *extra: str) -> list[str]:
    """The web server's command line (run_platform and bench/ingest.py start the same one)."""
    return [
        sys.executable,
        "-m",
        "gunicorn",
        "driftwatch.wsgi:application",
        "--pythonpath",
        f"{PLATFORM_DIR},{ROOT}",
        "--bind",
        bind,
        "--workers",
        str(workers),
        "--timeout",
        "120",
        # gunicorn 27's control socket sits at one path per user: concurrent servers (tests, runs
        # side by side) would take it from each other, and nothing here uses it.
        "--no-control-socket",
        # Prometheus multiprocess mode for /metrics, and the dead workers' files folded away.
        "--config",
        str(PLATFORM_DIR / "driftwatch" / "gunicorn_config.py"),
        *extra,
    ]
