"""Request latency and responses by URL route (never the raw path: its values are unbounded)."""

import time
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from core.metrics import REQUEST_SECONDS, RESPONSES

UNMATCHED = "unmatched"  # no route: static files, 404s, requests refused before routing


def endpoint_of(request: HttpRequest) -> str:
    match = getattr(request, "resolver_match", None)
    return f"/{match.route}" if match is not None and match.route else UNMATCHED


class RequestMetricsMiddleware:
    """Outermost, so the time includes every other middleware."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        started = time.perf_counter()
        response = self.get_response(request)
        endpoint, method = endpoint_of(request), _method(request)
        REQUEST_SECONDS.labels(endpoint, method).observe(time.perf_counter() - started)
        RESPONSES.labels(endpoint, method, str(response.status_code)).inc()
        return response


KNOWN_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def _method(request: HttpRequest) -> str:
    method = (request.method or "").upper()
    return method if method in KNOWN_METHODS else "other"  # a client can send any word here
