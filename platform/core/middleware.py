"""Rejects oversized API requests with 413 before the body is read."""

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse

from core.errors import too_large_response


class RequestSizeLimitMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        limit = settings.DRIFTWATCH_MAX_REQUEST_BYTES
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        if length > limit:
            return too_large_response(limit)
        return self.get_response(request)
