"""GET /metrics: the Prometheus text format (prometheus-client)."""

from collections.abc import Iterator

from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest
from prometheus_client.core import Metric
from prometheus_client.multiprocess import MultiProcessCollector

from observability import multiprocess
from observability.access import scrape_refusal
from observability.collector import DatabaseCollector


class Scrape:
    """This process's counters (or, under gunicorn, every worker's, summed from their files)
    followed by the gauges read from the database and the broker."""

    def collect(self) -> Iterator[Metric]:
        path = multiprocess.directory()
        if path is None:
            yield from REGISTRY.collect()
        else:
            with multiprocess.folder_lock(path, exclusive=False):
                counted = list(MultiProcessCollector(None, str(path)).collect())
            yield from counted
        yield from DatabaseCollector().collect()


def exposition() -> bytes:
    return generate_latest(Scrape())


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    refused = scrape_refusal(request)
    if refused is not None:
        return refused
    return HttpResponse(exposition(), content_type=CONTENT_TYPE_LATEST)
