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

from celery import Celery  # noqa: E402
from kombu import Queue  # noqa: E402

from workers import queues  # noqa: E402

app = Celery("driftwatch")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.conf.task_default_queue = queues.DEFAULT
app.conf.task_queues = (Queue(queues.DEFAULT), Queue(queues.CHECKS))
app.conf.task_create_missing_queues = True  # gpu.<host> queues are named per node
app.conf.task_routes = {
    "driftwatch.checks.run_due": {"queue": queues.CHECKS},
    "driftwatch.checks.reap_stuck": {"queue": queues.CHECKS},
    "driftwatch.checks.check_model": {"queue": queues.CHECKS},
    "driftwatch.checks.refresh_labels": {"queue": queues.CHECKS},
    # everything else (notifications, reports) goes to the default queue
}
app.autodiscover_tasks(["workers"], related_name="tasks")
