"""Task names are stored in beat rows and queued messages: renaming one silently breaks them."""

from django.conf import settings

from workers import queues
from workers.celery_app import app
from workers.tasks import monitoring, retraining, system

PINNED = {
    (system, "platform_info"): "driftwatch.system.platform_info",
    (system, "outbox_flush"): "driftwatch.system.outbox_flush",
    (monitoring, "run_due_checks"): "driftwatch.checks.run_due",
    (monitoring, "reap_stuck_checks"): "driftwatch.checks.reap_stuck",
    (monitoring, "check_model"): "driftwatch.checks.check_model",
    (monitoring, "check_slice"): "driftwatch.checks.check_slice",
    (monitoring, "check_merge"): "driftwatch.checks.check_merge",
    (monitoring, "refresh_labels"): "driftwatch.checks.refresh_labels",
    (monitoring, "deliver_notification"): "driftwatch.alerts.deliver_notification",
    (monitoring, "render_report"): "driftwatch.checks.render_report",
    (monitoring, "compact_parts"): "driftwatch.store.compact_parts",
    (monitoring, "collect_parts"): "driftwatch.store.collect_parts",
    (monitoring, "expire_payloads"): "driftwatch.store.expire_payloads",
    (retraining, "run_retrain_job"): "driftwatch.retraining.run_job",
    (retraining, "retrain_jobs_from_alerts"): "driftwatch.retraining.jobs_from_alerts",
    (retraining, "reap_stale_retrain_jobs"): "driftwatch.retraining.reap_stale",
    (retraining, "deliver_retrain_webhook"): "driftwatch.retraining.deliver_webhook",
    (retraining, "place_retrain_jobs"): "driftwatch.retraining.place_jobs",
}


def test_task_names_are_permanent() -> None:
    assert {key: getattr(*key).name for key in PINNED} == PINNED


def test_the_name_constants_are_the_pinned_names() -> None:
    constants = {
        value for key, value in vars(queues).items() if key.isupper() and str(value).startswith("driftwatch.")
    }
    assert constants == set(PINNED.values())


def test_the_apps_include_registers_every_pinned_task() -> None:
    app.loader.import_default_modules()  # what a worker does at start
    registered = {name for name in app.tasks if name.startswith("driftwatch.")}
    assert registered == set(PINNED.values())


def test_check_tasks_go_to_checks_training_to_training_and_the_rest_to_default() -> None:
    router = app.amqp.router
    queue = {name: router.route({}, name)["queue"].name for name in PINNED.values()}
    checks = {n for n, q in queue.items() if q == "checks"}
    assert checks == {
        "driftwatch.checks.run_due",
        "driftwatch.checks.reap_stuck",
        "driftwatch.checks.check_model",
        "driftwatch.checks.check_slice",
        "driftwatch.checks.check_merge",
        "driftwatch.checks.refresh_labels",
    }
    assert queue["driftwatch.retraining.run_job"] == "training"
    rest = {q for n, q in queue.items() if n not in checks and n != "driftwatch.retraining.run_job"}
    assert rest == {"default"}


def test_workers_log_through_djangos_logging_config() -> None:
    """Celery would install its own handlers; the signal hands the config to Django's LOGGING."""
    import logging

    from celery.signals import setup_logging

    logging.getLogger().handlers.clear()
    setup_logging.send(sender=None, loglevel="INFO", logfile=None, format="", colorize=False)
    formats = [h.formatter._fmt for h in logging.getLogger().handlers if h.formatter]  # noqa: SLF001
    assert formats == [settings.LOGGING["formatters"]["driftwatch"]["format"]]
