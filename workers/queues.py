"""Queue names, in one place, with the worker pool that consumes each (STYLE.md #10)."""

# CPU workers: `celery -A workers.celery_app worker -Q default,checks`
DEFAULT = "default"  # notifications, reports, housekeeping
CHECKS = "checks"  # scheduled quality/drift checks, one task per model and window


def gpu_queue(host: str) -> str:
    """The per-node training queue; its worker runs with concurrency 1 and prefetch 1."""
    return f"gpu.{host}"
