"""Celery tasks: thin glue that loads rows by id, calls one service, returns.

Every task has an explicit, permanent `name=`: beat rows and queued messages store it
(tests/workers/test_task_names.py pins them).
"""

import logging
import platform
import sysconfig
from datetime import datetime
from typing import Any

from workers.celery_app import app

logger = logging.getLogger(__name__)


@app.task(name="driftwatch.system.platform_info")
def platform_info() -> dict[str, str]:
    """Proves inside a worker that `import platform` is the standard-library module."""
    return {
        "python_version": platform.python_version(),
        "module_file": str(getattr(platform, "__file__", "")),
        "stdlib_dir": sysconfig.get_paths()["stdlib"],
    }


@app.task(name="driftwatch.checks.run_due")
def run_due_checks() -> int:
    from monitoring.scheduling import checks_dispatch_due

    return checks_dispatch_due()


@app.task(name="driftwatch.checks.reap_stuck")
def reap_stuck_checks() -> int:
    from monitoring.notify import notifications_reap_stuck
    from monitoring.scheduling import checks_reap_stuck

    return checks_reap_stuck() + notifications_reap_stuck()


@app.task(name="driftwatch.checks.refresh_labels")
def refresh_labels() -> int:
    from monitoring.checks import checks_labels_refresh

    return checks_labels_refresh()


@app.task(name="driftwatch.checks.check_model")
def check_model(model_id: int, window_spec: str, window_end: str) -> int | None:
    from monitoring.checks import parse_window_spec, quality_check_run

    window = parse_window_spec(window_spec, datetime.fromisoformat(window_end))
    check = quality_check_run(model_id=model_id, window=window)
    return check.pk if check else None


@app.task(
    name="driftwatch.alerts.deliver_notification",
    bind=True,
    max_retries=5,
    default_retry_delay=10,
)
def deliver_notification(self: Any, notification_id: int) -> str:
    from monitoring.notify import TransientDeliveryError, notification_deliver

    try:
        return notification_deliver(notification_id=notification_id)
    except TransientDeliveryError as exc:
        # Exponential backoff: 10 s, 20 s, 40 s, ...
        raise self.retry(exc=exc, countdown=10 * 2**self.request.retries) from exc
    except Exception:
        # A refusal (4xx) or bad config: recorded as failed on the row, never retried.
        logger.exception("notification %s failed for good", notification_id)
        return "failed"


@app.task(name="driftwatch.checks.render_report")
def render_report(check_id: int) -> str | None:
    from monitoring.reports import check_report_render

    return check_report_render(check_id=check_id)
