"""The Celery application: configured from Django settings (namespace CELERY_)."""

import os
import sys
from pathlib import Path

# platform/ goes on sys.path, never as a package named `platform` (stdlib clash).
_ROOT = Path(__file__).resolve().parents[1]
for _path in (str(_ROOT), str(_ROOT / "platform")):
    if _path not in sys.path:
        sys.path.insert(0, _path)
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "driftwatch.settings")

from logging.config import dictConfig  # noqa: E402
from typing import Any  # noqa: E402

from celery import Celery  # noqa: E402
from celery.signals import setup_logging  # noqa: E402
from django.conf import settings  # noqa: E402
from kombu import Queue  # noqa: E402

from workers import queues  # noqa: E402

# The task modules, imported by every worker at start (after django.setup(), through Celery's
# Django fixup). The web and beat processes never import them: they send tasks by name.
app = Celery(
    "driftwatch",
    include=[
        "workers.tasks.system",
        "workers.tasks.monitoring",
        "workers.tasks.retraining",
        "workers.tasks.gpu",
    ],
)
app.config_from_object("django.conf:settings", namespace="CELERY")
app.conf.task_default_queue = queues.DEFAULT
app.conf.task_queues = (Queue(queues.DEFAULT), Queue(queues.CHECKS), Queue(queues.TRAINING))
app.conf.task_create_missing_queues = True  # gpu.<host> queues are named per node
app.conf.task_routes = {name: {"queue": queue} for name, queue in queues.ROUTES.items()}


@setup_logging.connect
def _django_logging(**kwargs: Any) -> None:
    """Workers and beat log through Django's LOGGING (same format and levels as the web)."""
    dictConfig(settings.LOGGING)
