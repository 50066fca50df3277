"""One JSON error shape for the API: {"error": code, "detail": text, "errors": [{row, field, message}]}."""

from dataclasses import asdict, dataclass
from typing import Any

from django.http import JsonResponse
from rest_framework import status
from rest_framework.exceptions import APIException
from rest_framework.response import Response
from rest_framework.views import exception_handler

# A rejected batch reports at most this many row errors; the count says how many there were.
MAX_REPORTED_ERRORS = 100


@dataclass(frozen=True)
class FieldError:
    row: int | None
    field: str
    message: str


class InvalidInput(APIException):
    """Bad input: 400 naming row and field. Raised before anything of the request is stored."""

    status_code = status.HTTP_400_BAD_REQUEST
    default_code = "invalid"

    def __init__(self, errors: list[FieldError]) -> None:
        self.errors = errors
        first = errors[0]
        where = f"row {first.row}, " if first.row is not None else ""
        super().__init__(f"{len(errors)} invalid value(s); first: {where}{first.field}: {first.message}")


class Conflict(APIException):
    status_code = status.HTTP_409_CONFLICT
    default_code = "conflict"


def too_large_response(limit: int) -> JsonResponse:
    return JsonResponse(
        {
            "error": "request_too_large",
            "detail": f"request body exceeds {limit} bytes",
            "errors": [],
        },
        status=413,
    )


def api_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    response = exception_handler(exc, context)
    if response is None:
        return None
    body: dict[str, Any] = {"error": getattr(exc, "default_code", "error"), "errors": []}
    if isinstance(exc, InvalidInput):
        body["detail"] = str(exc.detail)
        body["error_count"] = len(exc.errors)
        body["errors"] = [asdict(e) for e in exc.errors[:MAX_REPORTED_ERRORS]]
    elif isinstance(response.data, dict) and "detail" in response.data:
        body["detail"] = str(response.data["detail"])
        if hasattr(response.data["detail"], "code"):
            body["error"] = response.data["detail"].code
    else:
        body["detail"] = "invalid request"
        body["errors"] = _flatten(response.data)
    response.data = body
    return response


def _flatten(data: Any, prefix: str = "") -> list[dict[str, Any]]:
    """DRF serializer errors → [{row: None, field, message}]."""
    if isinstance(data, dict):
        out: list[dict[str, Any]] = []
        for key, value in data.items():
            out += _flatten(value, f"{prefix}.{key}" if prefix else str(key))
        return out
    if isinstance(data, list) and all(isinstance(item, str) for item in data):
        return [{"row": None, "field": prefix or "body", "message": str(m)} for m in data]
    if isinstance(data, list):
        out = []
        for index, value in enumerate(data):
            out += _flatten(value, f"{prefix}[{index}]")
        return out
    return [{"row": None, "field": prefix or "body", "message": str(data)}]
