"""Rejects requests the views must never see: oversized or chunked bodies, NUL in the URL."""

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse

from core.errors import too_large_response
from core.text import string_problem


def _invalid(status: int, error: str, field: str, message: str) -> JsonResponse:
    return JsonResponse(
        {
            "error": error,
            "detail": f"{field}: {message}",
            "errors": [{"row": None, "field": field, "message": message}],
        },
        status=status,
    )


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
        if "chunked" in request.META.get("HTTP_TRANSFER_ENCODING", "").lower() and not length:
            # Django reads a body without Content-Length as empty: refuse it rather than lose it.
            return _invalid(
                411, "length_required", "Content-Length", "required (chunked bodies are not read)"
            )
        return self.get_response(request)


class UrlTextMiddleware:
    """NUL characters in the path or a query parameter: 400 naming it (PostgreSQL refuses them)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if string_problem(request.path):
            return _invalid(400, "invalid", "path", "must not contain NUL characters")
        for key, values in request.GET.lists():
            for text in (key, *values):
                problem = string_problem(text)
                if problem:
                    name = key.replace("\x00", "\\x00")[:100]
                    return _invalid(400, "invalid", name, problem)
        return self.get_response(request)
