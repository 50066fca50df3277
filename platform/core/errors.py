"""One JSON error shape for the API: {"error": code, "detail": text, "errors": [{row, field, message}]}."""

from dataclasses import dataclass

from django.http import JsonResponse
from rest_framework import status
from rest_framework.exceptions import APIException


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
