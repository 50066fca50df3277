"""evidently's HTML report for a stored check: its window against the active reference.

The row is the source of truth, as for checks: requested → rendering → ready | failed, each
step a compare-and-set. A failure (bad data, evidently refusing it) is recorded on the row with
its error and never retried on its own; staff retry it. A request stuck past
DRIFTWATCH_CHECK_STALE_SECONDS (its message lost, its worker killed) is re-sent by the reaper,
and given up as failed after MAX_ATTEMPTS sends.
"""

import logging
import re
from datetime import datetime

import pandas as pd
from django.core.files.base import ContentFile
from django.db.models import F, Q
from django.utils import timezone

from core.enqueue import enqueue
from monitoring.checks import MAX_ATTEMPTS, stale_after
from monitoring.models import CheckState, QualityCheck, ReportState
from monitoring.reference import feature_columns
from monitoring.selectors import policy_for
from monitoring.window import parse_window_spec, window_load
from registry.models import ReferenceDataset, RegisteredModel
from registry.reference import LABEL, PREDICTION, PROBA_PREFIX
from workers import queues
from workers.drift.evidently_adapter import ReportColumns, render_check_report_html

logger = logging.getLogger(__name__)

PENDING = (ReportState.REQUESTED, ReportState.RENDERING)
ERROR_CHARS = 300


class ReportUnavailable(Exception):
    """The check has no window of predictions to report on (skipped, failed or running)."""


def check_report_request(*, check: QualityCheck) -> bool:
    """Request the report, or retry a failed one; enqueue its rendering after commit.

    False when one is pending or ready already: a double click enqueues once.
    """
    if check.state != CheckState.DONE:
        raise ReportUnavailable(f"check #{check.pk} is {check.state}: there is no window to report on")
    retryable = [ReportState.NONE, ReportState.FAILED]
    if check.report_state == ReportState.READY and not _stored(check):
        retryable.append(ReportState.READY)  # its file is gone from storage: render it again
    requested = QualityCheck.objects.filter(pk=check.pk, report_state__in=retryable).update(
        report_state=ReportState.REQUESTED,
        report_requested_at=timezone.now(),
        report_started_at=None,
        report_attempts=1,
        report_error="",
    )
    if requested != 1:
        logger.info("report not requested again: check=%s is pending or ready", check.pk)
        return False
    enqueue(queues.RENDER_REPORT, args=[check.pk])
    logger.info("report requested: check=%s model=%s", check.pk, check.model_id)
    return True


def _stored(check: QualityCheck) -> bool:
    name = check.report.name
    return check.report.storage.exists(name) if name else False


def check_report_render(*, check_id: int) -> str | None:
    """Render a requested (or never requested) report; the stored file's name, None if it failed."""
    check = QualityCheck.objects.select_related("model").filter(pk=check_id).first()
    if check is None:
        logger.warning("report skipped: check %s is gone", check_id)
        return None
    claimed = _claim(check)
    if claimed is None:
        logger.info("report not claimed: check=%s is %s", check_id, check.report_state or "not requested")
        return check.report.name or None  # rendered already, failed, or another worker has it
    try:
        html = _render_html(claimed)
    except Exception as exc:
        logger.exception("report failed: check=%s model=%s", check_id, check.model_id)
        _finish(claimed, report_state=ReportState.FAILED, report_error=report_error_text(exc))
        return None
    claimed.report.save(f"check-{claimed.pk}.html", ContentFile(html.encode()), save=False)
    _finish(claimed, report_state=ReportState.READY, report=claimed.report.name)
    logger.info("report ready: check=%s file=%s", check_id, claimed.report.name)
    return claimed.report.name


def _claim(check: QualityCheck) -> QualityCheck | None:
    pending = QualityCheck.objects.filter(
        pk=check.pk, report_state__in=(ReportState.NONE, ReportState.REQUESTED)
    )
    if pending.update(report_state=ReportState.RENDERING, report_started_at=timezone.now()) != 1:
        return None
    check.refresh_from_db()
    return check


def _finish(check: QualityCheck, **fields: object) -> None:
    """Only while the rendering is still ours: the reaper may have re-sent it meanwhile."""
    ours = QualityCheck.objects.filter(
        pk=check.pk, report_state=ReportState.RENDERING, report_attempts=check.report_attempts
    )
    if ours.update(**fields) != 1:
        logger.warning("report of check %s: this rendering was superseded", check.pk)


def _render_html(check: QualityCheck) -> str:
    if check.state != CheckState.DONE:
        raise ReportUnavailable(f"the check is {check.state}: there is no window to report on")
    model = check.model
    reference = ReferenceDataset.objects.filter(model=model, is_active=True).first()
    if reference is None:
        raise ReportUnavailable(f"model {model.name} has no reference dataset")
    with reference.file.open("rb") as handle:
        reference_frame = pd.read_parquet(handle)
    spec = parse_window_spec(check.window_spec, check.window_end)
    window = window_load(
        model=model,
        start=spec.start,
        end=spec.end,
        last_n=spec.last_n,
        labelled_only=spec.labelled_only,
    )
    columns = report_columns(model=model, reference=reference_frame, window=window.frame)
    drift_share = policy_for(model).drift_share
    return render_check_report_html(
        reference_frame, window.frame, columns, drift_share=drift_share, timestamp=check.window_end
    )


def report_columns(*, model: RegisteredModel, reference: pd.DataFrame, window: pd.DataFrame) -> ReportColumns:
    """The features the check tests for drift (those the reference has), and the roles of the
    prediction, label and probability columns, which are no features."""
    features = {n: t for n, t in feature_columns(model).items() if n in reference.columns}
    probabilities = tuple(PROBA_PREFIX + str(c) for c in model.classes)
    return ReportColumns(
        features=features,
        prediction=PREDICTION,
        target=LABEL,
        task="classification" if model.is_classification else "regression",
        classes=tuple(model.classes),
        probabilities=probabilities if all(p in window.columns for p in probabilities) else (),
    )


# An absolute path (a storage location, a site-packages file) says nothing a reader needs.
_ABSOLUTE_PATH = re.compile(r"(?<![\w.])/(?:[\w.@+-]+/)+([\w.@+-]+)")


def report_error_text(exc: BaseException) -> str:
    """What the page shows: the exception's kind and first line, paths cut to their file name,
    bounded; the traceback goes only to the worker's log."""
    lines = str(exc).strip().splitlines()
    text = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
    text = _ABSOLUTE_PATH.sub(r"…/\1", text)
    return text if len(text) <= ERROR_CHARS else text[: ERROR_CHARS - 1] + "…"


def reports_reap_stuck(*, now: datetime | None = None) -> int:
    """Re-send reports left requested or rendering past the stale time (a lost message, a
    killed worker); give up as failed after MAX_ATTEMPTS sends. Returns how many were re-sent."""
    now = now or timezone.now()
    before = now - stale_after()
    stuck = QualityCheck.objects.filter(
        Q(report_state=ReportState.REQUESTED, report_requested_at__lt=before)
        | Q(report_state=ReportState.RENDERING, report_started_at__lt=before)
    )
    return sum(_reap(check, now) for check in stuck)


def _reap(check: QualityCheck, now: datetime) -> bool:
    same = QualityCheck.objects.filter(
        pk=check.pk, report_state=check.report_state, report_attempts=check.report_attempts
    )
    if check.report_attempts >= MAX_ATTEMPTS:
        error = f"gave up after {check.report_attempts} attempts: no worker finished rendering it"
        if same.update(report_state=ReportState.FAILED, report_error=error) == 1:
            logger.warning("reaper: report of check=%s given up: %s", check.pk, error)
        return False
    resent = same.update(
        report_state=ReportState.REQUESTED,
        report_requested_at=now,
        report_started_at=None,
        report_attempts=F("report_attempts") + 1,
    )
    if resent != 1:
        return False  # it moved on meanwhile
    enqueue(queues.RENDER_REPORT, args=[check.pk])
    logger.warning("reaper: report of check=%s stuck %s, re-sent", check.pk, check.report_state)
    return True
