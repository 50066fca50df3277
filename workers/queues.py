"""Queue names and task names, in one place, with the worker pool that consumes each (STYLE #10).

Task names are permanent: beat rows and queued messages store them, and the platform enqueues
by name (`core.enqueue.enqueue`) so it never imports the task modules.
tests/workers/test_task_names.py pins them.
"""

# CPU workers: `celery -A workers.celery_app worker -Q default,checks`
DEFAULT = "default"  # notifications, reports, housekeeping
CHECKS = "checks"  # scheduled quality/drift checks, one task per model and window
# Training workers: `celery -A workers.celery_app worker -Q training --concurrency 1 --prefetch-multiplier 1`
# (one job at a time per worker: the memory plan assumes the device is its own).
TRAINING = "training"
# GPU workers: one queue per device, `train.<host>.<index>` (train_queue below), consumed by the
# worker pinned to that device (`CUDA_VISIBLE_DEVICES=<index> celery ... worker -Q train.<host>.<index>
# --concurrency <jobs that may share it> --prefetch-multiplier 1`); the placer only sends a job there
# when its reservation fits the device, so several jobs may run on one device at once.
TRAIN_QUEUE_PREFIX = "train"

# Task names (the `name=` of each task in workers/tasks/).
PLATFORM_INFO = "driftwatch.system.platform_info"
CHECKS_RUN_DUE = "driftwatch.checks.run_due"
CHECKS_REAP_STUCK = "driftwatch.checks.reap_stuck"
CHECKS_REFRESH_LABELS = "driftwatch.checks.refresh_labels"
CHECK_MODEL = "driftwatch.checks.check_model"
CHECK_SLICE = "driftwatch.checks.check_slice"  # a fanned-out check's slice (monitoring.fanout)
CHECK_MERGE = "driftwatch.checks.check_merge"  # its slices merged, the check stored
RENDER_REPORT = "driftwatch.checks.render_report"
DELIVER_NOTIFICATION = "driftwatch.alerts.deliver_notification"
RETRAIN_RUN = "driftwatch.retraining.run_job"
RETRAIN_FROM_ALERTS = "driftwatch.retraining.jobs_from_alerts"
RETRAIN_REAP = "driftwatch.retraining.reap_stale"
RETRAIN_WEBHOOK = "driftwatch.retraining.deliver_webhook"
RETRAIN_PLACE = "driftwatch.retraining.place_jobs"
OUTBOX_FLUSH = "driftwatch.system.outbox_flush"
PARTS_COMPACT = "driftwatch.store.compact_parts"
PARTS_COLLECT = "driftwatch.store.collect_parts"
PAYLOADS_EXPIRE = "driftwatch.store.expire_payloads"

# Where each task goes; a task not listed goes to DEFAULT.
ROUTES: dict[str, str] = {
    CHECKS_RUN_DUE: CHECKS,
    CHECKS_REAP_STUCK: CHECKS,
    CHECK_MODEL: CHECKS,
    CHECK_SLICE: CHECKS,
    CHECK_MERGE: CHECKS,
    CHECKS_REFRESH_LABELS: CHECKS,
    RETRAIN_RUN: TRAINING,
}


def train_queue(host: str, index: int) -> str:
    """The queue of one GPU (or simulated GPU) of one host."""
    return f"{TRAIN_QUEUE_PREFIX}.{host}.{index}"
