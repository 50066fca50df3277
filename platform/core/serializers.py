"""Shared pieces of the API's response definitions: datetimes, the error body, typed JSON columns.

Every response is rendered by a serializer, and drf-spectacular documents that same serializer,
so the OpenAPI document cannot drift from what the API returns
(tests/platform/test_openapi_responses.py validates real responses against it).
"""

from datetime import datetime
from typing import Any

from drf_spectacular.plumbing import resolve_type_hint
from drf_spectacular.utils import OpenApiResponse, extend_schema_field
from rest_framework import serializers


class IsoDateTimeField(serializers.DateTimeField):
    """`datetime.isoformat()` of the stored (UTC) value, e.g. "2026-11-30T12:00:00+00:00"."""

    def to_representation(self, value: datetime) -> str:
        return value.isoformat()  # None never reaches a field: the serializer renders it as null


class FieldErrorOut(serializers.Serializer):
    row = serializers.IntegerField(allow_null=True, help_text="the row of the batch; null: the request")
    field = serializers.CharField()
    message = serializers.CharField()


class ErrorOut(serializers.Serializer):
    """Every API error: the code, a sentence, and each bad (row, field) for a 400."""

    error = serializers.CharField(help_text="a code: invalid, not_found, not_authenticated, ...")
    detail = serializers.CharField()
    errors = FieldErrorOut(many=True)  # type: ignore[assignment]  # a declared field, popped by DRF
    error_count = serializers.IntegerField(required=False, help_text="for a 400: errors in all")


ERRORS = {
    400: "Invalid input: `errors` names each bad row and field; nothing of the request is stored.",
    401: "No token, or an invalid, revoked or expired one.",
    403: "The token's scope (or its list of models) does not allow this request.",
    404: "No model of that name.",
    411: "A chunked body without Content-Length.",
    413: "The body is larger than DRIFTWATCH_MAX_REQUEST_BYTES.",
    409: "The request conflicts with the current state.",
    415: "The body is not application/json.",
    429: "Over the token's ingestion rate; Retry-After says when to try again.",
}


def error_responses(*codes: int, notes: dict[int, str] | None = None) -> dict[int, OpenApiResponse]:
    """The ErrorOut responses for `codes`; `notes` replaces a code's generic description."""
    notes = notes or {}
    return {code: OpenApiResponse(ErrorOut, description=notes.get(code, ERRORS[code])) for code in codes}


# The errors any endpoint may answer, by what it takes: a token always; a model name in the
# path; a body (JSON only unless the view says otherwise).
AUTH = (401, 403)
NAMED = (*AUTH, 404)
BODY = (400, 411, 413)


def _loose(schema: Any) -> Any:
    """A TypedDict's schema with every key optional (a check not computed yet stores {}), and
    unions as anyOf (an empty object matches each member)."""
    if isinstance(schema, dict):
        out = {key: _loose(value) for key, value in schema.items() if key != "required"}
        if "oneOf" in out:
            out["anyOf"] = out.pop("oneOf")
        return out
    if isinstance(schema, list):
        return [_loose(item) for item in schema]
    return schema


def typed_json(hint: Any, description: str = "") -> serializers.JSONField:
    """A JSON column rendered as stored and documented by its TypedDict (or union of them)."""

    @extend_schema_field({**_loose(resolve_type_hint(hint)), "description": description})
    class TypedJSONField(serializers.JSONField):
        pass

    TypedJSONField.__name__ = f"{getattr(hint, '__name__', 'Typed')}JSONField"
    return TypedJSONField(read_only=True)


__all__ = [
    "AUTH",
    "BODY",
    "NAMED",
    "ErrorOut",
    "IsoDateTimeField",
    "error_responses",
    "typed_json",
]
