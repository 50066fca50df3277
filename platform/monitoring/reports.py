"""evidently's HTML drift report for a stored check: its window against the active reference."""

import logging

import pandas as pd
from django.core.files.base import ContentFile
from django.utils import timezone

from core.enqueue import enqueue
from monitoring.models import QualityCheck
from monitoring.reference import drift_columns
from monitoring.window import window_load
from registry.models import ReferenceDataset
from workers import queues

logger = logging.getLogger(__name__)


def check_report_request(*, check: QualityCheck) -> None:
    """Mark the report as requested and enqueue its rendering after commit."""
    QualityCheck.objects.filter(pk=check.pk).update(report_requested_at=timezone.now())
    enqueue(queues.RENDER_REPORT, args=[check.pk])


def check_report_render(*, check_id: int) -> str | None:
    check = QualityCheck.objects.select_related("model").filter(pk=check_id).first()
    if check is None:
        logger.warning("report skipped: check %s is gone", check_id)
        return None
    if check.report:
        return check.report.name  # already rendered: a re-run does nothing
    model = check.model
    reference = ReferenceDataset.objects.filter(model=model, is_active=True).first()
    if reference is None:
        raise ValueError(f"model {model.name} has no reference dataset")
    with reference.file.open("rb") as handle:
        reference_frame = pd.read_parquet(handle)
    last_n = int(check.window_spec.removesuffix("samples")) if check.window_spec.endswith("samples") else None
    start = None if last_n else check.window_start
    window = window_load(model=model, start=start, end=check.window_end, last_n=last_n)
    columns = {n: t for n, t in drift_columns(model, reference_frame).items() if n in window.frame.columns}
    from workers.drift.evidently_adapter import render_drift_report_html  # heavy: lazily, in the worker

    html = render_drift_report_html(reference_frame, window.frame, columns, timestamp=check.window_end)
    check.report.save(f"check-{check.pk}.html", ContentFile(html.encode()), save=False)
    QualityCheck.objects.filter(pk=check.pk).update(report=check.report.name)
    return check.report.name
