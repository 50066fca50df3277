"""Task names are stored in beat rows and queued messages: renaming one silently breaks them."""

from workers import tasks

PINNED = {
    "platform_info": "driftwatch.system.platform_info",
    "run_due_checks": "driftwatch.checks.run_due",
    "reap_stuck_checks": "driftwatch.checks.reap_stuck",
    "check_model": "driftwatch.checks.check_model",
    "refresh_labels": "driftwatch.checks.refresh_labels",
    "deliver_notification": "driftwatch.alerts.deliver_notification",
    "render_report": "driftwatch.checks.render_report",
}


def test_task_names_are_permanent() -> None:
    assert {attr: getattr(tasks, attr).name for attr in PINNED} == PINNED


def test_every_driftwatch_task_is_pinned() -> None:
    registered = {name for name in tasks.app.tasks if name.startswith("driftwatch.")}
    assert registered == set(PINNED.values())


def test_check_tasks_go_to_the_checks_queue_and_the_rest_to_default() -> None:
    router = tasks.app.amqp.router
    queue = {name: router.route({}, name)["queue"].name for name in PINNED.values()}
    checks = {n for n, q in queue.items() if q == "checks"}
    assert checks == {
        "driftwatch.checks.run_due",
        "driftwatch.checks.reap_stuck",
        "driftwatch.checks.check_model",
        "driftwatch.checks.refresh_labels",
    }
    assert {q for n, q in queue.items() if n not in checks} == {"default"}
