"""Tasks about the worker itself."""

import platform
import sysconfig

from core import enqueue
from workers import queues
from workers.tasks.base import instrumented_task


@instrumented_task(queues.PLATFORM_INFO)
def platform_info() -> dict[str, str]:
    """Proves inside a worker that `import platform` is the standard-library module."""
    return {
        "python_version": platform.python_version(),
        "module_file": str(getattr(platform, "__file__", "")),
        "stdlib_dir": sysconfig.get_paths()["stdlib"],
    }


@instrumented_task(queues.OUTBOX_FLUSH)
def outbox_flush() -> int:
    """Re-send the messages the broker refused while it was down (core.enqueue)."""
    return enqueue.outbox_flush()
