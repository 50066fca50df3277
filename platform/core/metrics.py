"""Prometheus instruments counted where things happen (ingestion, each request); exported by
the observability app's /metrics together with gauges it reads from the database at scrape time.

Here, at the bottom layer, so that monitoring can count its ingestion without importing the
observability app above it. Under gunicorn the values live in PROMETHEUS_MULTIPROC_DIR (one file
per worker, summed at scrape); in a single process (tests, runserver) in the default registry.
Label values are never a client's string: a model label is a registered model's name, a
rejection reason one of a fixed set, an endpoint a URL route pattern.
"""

from collections.abc import Callable
from functools import wraps
from typing import Any, ParamSpec, TypeVar

from prometheus_client import Counter, Histogram, disable_created_metrics

from core.errors import InvalidInput

# No `<name>_created` series: multiprocess mode has none, and one process should export what many do.
disable_created_metrics()

P = ParamSpec("P")
R = TypeVar("R")

INGEST_ACCEPTED = Counter(
    "driftwatch_ingest_accepted_rows",
    "Rows stored by the ingestion API (predictions: new samples; labels: labels stored).",
    ["model", "kind"],
)
INGEST_DUPLICATES = Counter(
    "driftwatch_ingest_duplicate_rows",
    "Prediction rows not stored again: their sample id was already stored (a client retry).",
    ["model", "kind"],
)
INGEST_REJECTED_ROWS = Counter(
    "driftwatch_ingest_rejected_rows",
    "Rows named in a 400 of the ingestion API, by the field of the row's first error "
    "(the request stored nothing).",
    ["model", "kind", "reason"],
)
INGEST_REJECTED_REQUESTS = Counter(
    "driftwatch_ingest_rejected_requests",
    "Ingestion requests answered 400 (nothing of them stored).",
    ["model", "kind"],
)
# Ingestion of 10,000 rows takes about a second; checks and reports up to tens of seconds.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
REQUEST_SECONDS = Histogram(
    "driftwatch_http_request_duration_seconds",
    "Time from the request reaching Django to the response leaving it, by URL route.",
    ["endpoint", "method"],
    buckets=LATENCY_BUCKETS,
)
RESPONSES = Counter(
    "driftwatch_http_responses",
    "Responses by URL route, method and status code.",
    ["endpoint", "method", "status"],
)

# The fields a row error can name (registry.schema, monitoring.validation); `sample` and `label`
# also stand for a row that is not an object. Anything else is an unknown key the client sent.
ROW_FIELDS = frozenset(
    {"id", "timestamp", "features", "prediction", "probabilities", "version", "label", "sample"}
)
UNKNOWN_FIELD = "unknown_field"


def rejection_reason(field: str) -> str:
    """`features.age` → `features`; a key of the client's own → `unknown_field` (bounded labels)."""
    top = field.split(".", 1)[0]
    return top if top in ROW_FIELDS else UNKNOWN_FIELD


def rejected_rows_count(*, model: str, kind: str, error: InvalidInput) -> None:
    INGEST_REJECTED_REQUESTS.labels(model, kind).inc()
    first: dict[int, str] = {}
    for item in error.errors:
        if item.row is not None:
            first.setdefault(item.row, rejection_reason(item.field))
    reasons: dict[str, int] = {}
    for reason in first.values():
        reasons[reason] = reasons.get(reason, 0) + 1
    for reason, rows in reasons.items():
        INGEST_REJECTED_ROWS.labels(model, kind, reason).inc(rows)


def ingest_counted(
    kind: str, counts: Callable[[Any], tuple[int, int]]
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Counts an ingestion service's outcome: `counts(result)` is (stored, duplicates); an
    InvalidInput counts its rows by reason and is re-raised. The service takes `model=`."""

    def decorate(service: Callable[P, R]) -> Callable[P, R]:
        @wraps(service)
        def counted(*args: P.args, **kwargs: P.kwargs) -> R:
            name = str(getattr(kwargs.get("model"), "name", ""))
            try:
                result = service(*args, **kwargs)
            except InvalidInput as exc:
                rejected_rows_count(model=name, kind=kind, error=exc)
                raise
            stored, duplicates = counts(result)
            INGEST_ACCEPTED.labels(name, kind).inc(stored)
            if duplicates:
                INGEST_DUPLICATES.labels(name, kind).inc(duplicates)
            return result

        return counted

    return decorate
