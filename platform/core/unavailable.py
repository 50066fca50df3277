"""A database or broker outage answers 503 with a JSON body (and Retry-After), never a 500.

The exception reaches here from any view (DRF re-raises what its handler does not know); the
cause is logged for the operator, while the client learns only which service is down.
"""

import logging
from collections.abc import Callable

import kombu.exceptions
import redis.exceptions
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse

logger = logging.getLogger(__name__)

RETRY_AFTER_SECONDS = 5


def broker_errors() -> tuple[type[BaseException], ...]:
    """What kombu and redis-py raise when the broker cannot be reached."""
    return (
        kombu.exceptions.OperationalError,
        redis.exceptions.ConnectionError,
        redis.exceptions.TimeoutError,
    )


def unavailable_service(exc: BaseException) -> str | None:
    """ "database", "broker" or None (not an outage)."""
    if isinstance(exc, OperationalError | InterfaceError):
        return "database"
    if isinstance(exc, broker_errors()):
        return "broker"
    return None


def unavailable_response(service: str) -> JsonResponse:
    response = JsonResponse(
        {
            "error": f"{service}_unavailable",
            "detail": f"the {service} is unavailable; retry later",
            "errors": [],
        },
        status=503,
    )
    response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response


class ServiceUnavailableMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        service = unavailable_service(exception)
        if service is None:
            return None
        logger.warning("%s unavailable during %s %s: %r", service, request.method, request.path, exception)
        return unavailable_response(service)
