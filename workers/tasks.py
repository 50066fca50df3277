"""Celery tasks: thin glue that loads rows by id, calls one service, returns.

Every task has an explicit, permanent `name=`: beat rows and queued messages store it.
"""

import platform
import sysconfig

from workers.celery_app import app


@app.task(name="driftwatch.system.platform_info")
def platform_info() -> dict[str, str]:
    """Proves inside a worker that `import platform` is the standard-library module."""
    return {
        "python_version": platform.python_version(),
        "module_file": str(getattr(platform, "__file__", "")),
        "stdlib_dir": sysconfig.get_paths()["stdlib"],
    }
