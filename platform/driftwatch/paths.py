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


def dotted_name_reaching(path: Path, entries: list[str]) -> str | None:
    """The dotted module name under which ``path`` (a folder) could be imported from one of the
    import path ``entries``, or None when no name reaches it (some part is not an identifier,
    e.g. has a dot, which an import always splits on)."""
    resolved = path.resolve()
    for entry in entries:
        try:
            parts = resolved.relative_to(Path(entry or ".").resolve()).parts
        except ValueError:
            continue
        if all(part.isidentifier() for part in parts):
            return ".".join(parts) or "(the import path itself)"
    return None


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
