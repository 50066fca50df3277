"""The one task wrapper (as Sentry's ``instrumented_task``): every task is declared through it.

It logs the task's name, id, arguments and duration; calls the metric hooks with the outcome;
and classifies errors (``core.transient``): a transient one (database or broker blip, lock
timeout, or one of the task's own ``transient`` errors) is retried with exponential backoff up
to ``max_retries``; any other error is permanent: logged with its reason and raised once, never
retried (the service has recorded it on its row: a failed job, check or notification).
"""

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from celery import Task

from core.transient import is_transient
from workers.celery_app import app

logger = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Any])

MAX_RETRIES = 5
BACKOFF_SECONDS = 5.0  # 5 s, 10 s, 20 s, ... capped at BACKOFF_MAX_SECONDS
BACKOFF_MAX_SECONDS = 300.0


@dataclass(frozen=True)
class TaskEvent:
    """What a metric hook receives once per run: outcome is "ok", "retry" or "failed"."""

    name: str
    task_id: str
    outcome: str
    seconds: float
    retries: int
    error: str = ""


MetricHook = Callable[[TaskEvent], None]
METRIC_HOOKS: list[MetricHook] = []  # e.g. a Prometheus or StatsD exporter appends itself here


def metric_hook_add(hook: MetricHook) -> None:
    METRIC_HOOKS.append(hook)


def backoff_seconds(retries: int, base: float = BACKOFF_SECONDS) -> float:
    return min(base * 2.0**retries, BACKOFF_MAX_SECONDS)


def _emit(event: TaskEvent) -> None:
    for hook in list(METRIC_HOOKS):
        try:
            hook(event)
        except Exception:  # a broken exporter never fails the task it measures
            logger.exception("metric hook %r failed on %s", hook, event.name)


def instrumented_task(
    name: str,
    *,
    bind: bool = False,
    max_retries: int = MAX_RETRIES,
    transient: tuple[type[BaseException], ...] = (),
    backoff: float = BACKOFF_SECONDS,
    **options: Any,
) -> Callable[[F], Task]:
    """``@instrumented_task(queues.NAME)`` in place of ``@app.task(name=queues.NAME)``; with
    ``bind=True`` the function gets the Celery task first (for ``self.request.id``)."""

    def decorate(fn: F) -> Task:
        def run(task: Any, *args: Any, **kwargs: Any) -> Any:
            return _run(task, fn, _Policy(bind, transient, backoff), args, kwargs)

        run.__name__, run.__qualname__, run.__doc__ = fn.__name__, fn.__qualname__, fn.__doc__
        run.__module__ = fn.__module__
        task: Task = app.task(name=name, bind=True, max_retries=max_retries, **options)(run)
        return task

    return decorate


@dataclass(frozen=True)
class _Policy:
    bind: bool
    transient: tuple[type[BaseException], ...]
    backoff: float


def _run(
    task: Any,
    fn: Callable[..., Any],
    policy: _Policy,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Any:
    task_id, retries, started = task.request.id or "", int(task.request.retries or 0), time.monotonic()
    logger.info("task %s id=%s args=%s start (retry %s)", task.name, task_id, list(args), retries)

    def event(outcome: str, error: str = "") -> TaskEvent:
        return TaskEvent(task.name, task_id, outcome, time.monotonic() - started, retries, error)

    try:
        result = fn(task, *args, **kwargs) if policy.bind else fn(*args, **kwargs)
    except Exception as exc:
        reason = f"{type(exc).__name__}: {exc}"
        if is_transient(exc, policy.transient) and retries < task.max_retries:
            countdown = backoff_seconds(retries, policy.backoff)
            logger.warning(
                "task %s id=%s transient error, retry in %.0f s: %s", task.name, task_id, countdown, reason
            )
            _emit(event("retry", reason))
            raise task.retry(exc=exc, countdown=countdown) from exc
        logger.error("task %s id=%s failed for good: %s", task.name, task_id, reason)
        _emit(event("failed", reason))
        raise
    done = event("ok")
    logger.info("task %s id=%s done in %.3f s", task.name, task_id, done.seconds)
    _emit(done)
    return result
