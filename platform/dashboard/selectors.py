"""ORM reads only the dashboard makes: annotated model lists, check rows a chart or table
draws, and the moments a chart marks. Reads other pages share live in each app's selectors
(monitoring.selectors, registry.selectors, retraining.selectors); shaping rows for a page lives
in presenters, heatmap and quality_chart.

Every read here is bounded (a limit or a time range) and reads check and alert rows, never
the raw samples per page, except the one index walk in newest_labelled_time.
"""

import math
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Count, Exists, IntegerField, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce

from dashboard.timerange import TimeRange
from monitoring.alert_kinds import drift_alert_kinds
from monitoring.models import (
    LIVE_ALERT_STATES,
    Alert,
    AlertState,
    CheckState,
    GroundTruth,
    PredictionSample,
    QualityCheck,
)
from registry.models import ModelVersion, RegisteredModel, VersionStatus
from retraining.models import ACTIVE_STATES, RetrainJob

CHART_CHECKS = 400  # points drawn at most; a longer range is thinned evenly
CHART_LIMIT = 5000  # check rows read at most for one chart
MARKERS = 200  # of each kind
DRIFT_KINDS = drift_alert_kinds()
# What a chart never reads: left in the database when a long range loads thousands of rows.
HEAVY_COLUMNS = ("drift", "prediction_drift", "data_quality", "labels", "error", "report", "segments")
# What dashboard.quality_chart reads of each check it draws (any other field would cost a query a row).
CHART_COLUMNS = ("id", "window_end", "n_labelled", "metrics", "estimated", "per_version", "decisions")


# --- models ---------------------------------------------------------------------------------


def _count(queryset: QuerySet[Any]) -> Subquery:
    return Subquery(
        queryset.filter(model=OuterRef("pk")).order_by().values("model").annotate(c=Count("pk")).values("c"),
        output_field=IntegerField(),
    )


def models_with_counts(*, name: str | None = None) -> QuerySet[RegisteredModel]:
    """Models by name, each annotated with its alert and active-job counts and its champion's
    version number: one query, whatever the number of models."""
    queryset = RegisteredModel.objects.filter(name=name) if name else RegisteredModel.objects.all()
    return queryset.order_by("name").annotate(
        n_open=_count(Alert.objects.filter(state=AlertState.OPEN)),
        n_acknowledged=_count(Alert.objects.filter(state=AlertState.ACKNOWLEDGED)),
        n_drift_alerts=_count(Alert.objects.filter(state__in=LIVE_ALERT_STATES, kind__in=DRIFT_KINDS)),
        n_active_jobs=_count(RetrainJob.objects.filter(state__in=ACTIVE_STATES)),
        champion=Subquery(
            ModelVersion.objects.filter(model=OuterRef("pk"), status=VersionStatus.CHAMPION).values(
                "version"
            )[:1]
        ),
    )


# --- checks ---------------------------------------------------------------------------------


def _within(queryset: QuerySet[QualityCheck], trange: TimeRange | None) -> QuerySet[QualityCheck]:
    if trange is not None and trange.start is not None:
        queryset = queryset.filter(window_end__gt=trange.start)
    if trange is not None and trange.end is not None:
        queryset = queryset.filter(window_end__lt=trange.end)
    return queryset


def done_checks_newest_first(
    *, model: RegisteredModel, limit: int, light: bool = False
) -> list[QualityCheck]:
    """The latest ``limit`` finished checks, newest first; ``light`` leaves the heavy JSON unloaded."""
    queryset = QualityCheck.objects.filter(model=model, state=CheckState.DONE)
    if light:
        queryset = queryset.defer(*HEAVY_COLUMNS)
    return list(queryset.order_by("-window_end", "-pk")[:limit])


def checks_by_id(*, ids: list[int]) -> dict[int, QualityCheck]:
    """Whole check rows by id (one query)."""
    return {c.pk: c for c in QualityCheck.objects.filter(pk__in=set(ids))} if ids else {}


def checks_recent(
    *,
    model: RegisteredModel,
    limit: int,
    done_only: bool = False,
    trange: TimeRange | None = None,
    light: bool = False,
) -> list[QualityCheck]:
    """The latest ``limit`` checks (inside the range, if given), oldest first (the order charts
    read in). ``light`` leaves the drift, data-quality and label JSON unloaded."""
    queryset = QualityCheck.objects.filter(model=model)
    queryset = queryset.defer(*HEAVY_COLUMNS) if light else queryset.select_related("version")
    if done_only:
        queryset = queryset.filter(state=CheckState.DONE)
    queryset = _within(queryset, trange)
    return list(reversed(queryset.order_by("-window_end", "-pk")[:limit]))


def chart_checks(*, model: RegisteredModel, trange: TimeRange | None) -> list[QualityCheck]:
    """The finished checks a chart draws, oldest first: ids first (cheap), thinned to
    CHART_CHECKS, then only those rows and only the columns the chart reads (a whole row is
    30 columns, 7 of them dates: building 400 of them was most of the chart's time)."""
    queryset = _within(QualityCheck.objects.filter(model=model, state=CheckState.DONE), trange)
    ids = list(queryset.order_by("-window_end", "-pk").values_list("pk", flat=True)[:CHART_LIMIT])
    if len(ids) > CHART_CHECKS:
        ids = ids[:: math.ceil(len(ids) / CHART_CHECKS)]  # newest first: the newest is always kept
    rows = QualityCheck.objects.filter(pk__in=ids).only(*CHART_COLUMNS)
    return list(rows.order_by("window_end", "pk"))


def newest_labelled_time(*, model: RegisteredModel) -> datetime | None:
    """Just after the newest prediction that has its label (walks the time index backwards)."""
    labelled = GroundTruth.objects.filter(model=model, sample_id=OuterRef("sample_id"))
    newest = (
        PredictionSample.objects.filter(model=model)
        .filter(Exists(labelled))
        .order_by("-timestamp")
        .values_list("timestamp", flat=True)
        .first()
    )
    return newest + timedelta(microseconds=1) if newest else None


def newest_check_end(*, model: RegisteredModel) -> datetime | None:
    return (
        QualityCheck.objects.filter(model=model)
        .order_by("-window_end")
        .values_list("window_end", flat=True)
        .first()
    )


def check_has_report(*, check: QualityCheck) -> bool:
    name = check.report.name
    return check.report.storage.exists(name) if name else False


# --- moments a chart marks ------------------------------------------------------------------


def _in_range(queryset: QuerySet[Any], field: str, trange: TimeRange | None) -> QuerySet[Any]:
    """The newest MARKERS rows whose ``field`` lies in the range."""
    if trange is not None and trange.start is not None:
        queryset = queryset.filter(**{f"{field}__gte": trange.start})
    if trange is not None and trange.end is not None:
        queryset = queryset.filter(**{f"{field}__lt": trange.end})
    return queryset.order_by(f"-{field}")[:MARKERS]


def alerts_opened_in(*, model: RegisteredModel, trange: TimeRange | None) -> QuerySet[Alert]:
    """Alerts annotated with ``at``: the end of the window whose check opened them (the data's
    time, like the chart's points), else when they opened."""
    alerts = Alert.objects.filter(model=model).annotate(at=Coalesce("opened_by__window_end", "opened_at"))
    return _in_range(alerts, "at", trange)


def jobs_requested_in(*, model: RegisteredModel, trange: TimeRange | None) -> QuerySet[RetrainJob]:
    return _in_range(RetrainJob.objects.filter(model=model), "created_at", trange)


def versions_promoted_in(*, model: RegisteredModel, trange: TimeRange | None) -> QuerySet[ModelVersion]:
    promoted = ModelVersion.objects.filter(model=model, promoted_at__isnull=False)
    return _in_range(promoted, "promoted_at", trange)
