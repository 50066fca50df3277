"""Shared helpers for API views: JSON body reading with size limit, base view class."""

import json
from functools import partial
from typing import Any

import msgspec
import orjson
from django.conf import settings
from rest_framework import exceptions, status
from rest_framework.request import Request
from rest_framework.views import APIView

from core.auth import HasScope, IngestRateThrottle
from core.batch import RowSpans
from core.errors import FieldError, InvalidInput
from core.text import first_bad_string


class RequestTooLarge(exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_code = "request_too_large"


class ScopedAPIView(APIView):
    """An API view whose methods each need a token scope (`required_scopes`)."""

    permission_classes = [HasScope]
    throttle_classes = [IngestRateThrottle]
    required_scopes: dict[str, str] = {}


JSON_TYPES = ("application/json",)


def _require_json_content_type(request: Request) -> None:
    media = (request.content_type or "").split(";")[0].strip().lower()
    if media not in JSON_TYPES and not (media.startswith("application/") and media.endswith("+json")):
        raise exceptions.UnsupportedMediaType(media or "(none)", detail="send the body as application/json")


def json_body(request: Request, *, max_items: dict[str, int] | None = None) -> Any:
    """Parse the JSON body ourselves: one orjson.loads, and a 413 even for chunked uploads.

    Refused with a 400 naming the field: nesting deeper than orjson's 1,024 levels, lone
    surrogates and NUL characters (PostgreSQL text cannot hold them), and a list under a key of
    ``max_items`` longer than its limit, counted before any of its items is built.
    """
    raw = _read_body(request)
    if raw and max_items:
        _refuse_long_lists(raw, max_items)
    return _parse(raw)


def json_batch(request: Request, key: str, *, max_rows: int) -> RowSpans | Any:
    """The rows of a batch body ``{key: [row, ...]}`` as raw spans, decoded a chunk at a time
    (core.batch): an accepted batch then never holds all its rows as objects at once. A list
    longer than ``max_rows`` is refused by counting, as in ``json_body``.

    A body of another shape, or one that orjson alone cannot read (NaN tokens, lone surrogates,
    NUL characters, nesting past 1,024 levels), is parsed whole as ``json_body`` does, so its
    answer is the same: here where the body shows it, else when the service reads the row
    (``core.batch.UnreadableRow``: the view then calls the service again with the body parsed whole).
    """
    raw = _read_body(request)
    spans = _row_spans(raw, key, max_rows) if raw else None
    return _parse(raw) if spans is None else spans


def _read_body(request: Request) -> bytes:
    limit = settings.DRIFTWATCH_MAX_REQUEST_BYTES
    raw: bytes = request.read(limit + 1)
    if len(raw) > limit:
        raise RequestTooLarge(f"request body exceeds {limit} bytes")
    if raw:
        _require_json_content_type(request)
    return raw


def _row_spans(raw: bytes, key: str, max_rows: int) -> RowSpans | None:
    """The non-empty list under ``key`` as spans, if every value of the body is plain JSON."""
    try:
        top = msgspec.json.decode(raw, type=dict[str, msgspec.Raw])
        spans = msgspec.json.decode(top[key], type=list[msgspec.Raw]) if key in top else []
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):  # msgspec recurses
        return None
    if len(spans) > max_rows:
        raise InvalidInput([FieldError(None, key, f"at most {max_rows} rows per request, got {len(spans)}")])
    if not spans or b"\\u0000" in raw:
        return None
    try:  # orjson reads each other value; the rows are read by the service (UnreadableRow)
        for name, value in top.items():
            if name != key:
                orjson.loads(b"[" + bytes(value) + b"]")
    except orjson.JSONDecodeError:
        return None
    return RowSpans(spans, whole=partial(_parse, raw))


def _parse(raw: bytes) -> Any:
    try:
        body = orjson.loads(raw or b"null")  # ~5x faster than json on 10,000-sample batches
    except orjson.JSONDecodeError as exc:
        body = _lenient_loads(raw, exc)
    else:
        if b"\\u0000" not in raw:  # orjson refuses raw control characters and lone surrogates
            return body
    bad = first_bad_string(body)
    if bad is not None:
        raise InvalidInput([bad])
    return body


def _refuse_long_lists(raw: bytes, max_items: dict[str, int]) -> None:
    """Count a top-level list's items as raw spans of the body (msgspec.Raw: a view, no objects).
    Building a million samples' dicts only to find there are too many took 13x the body's size."""
    try:
        top = msgspec.json.decode(raw, type=dict[str, msgspec.Raw])
        lists = {
            key: msgspec.json.decode(top[key], type=list[msgspec.Raw]) for key in max_items if key in top
        }
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):  # msgspec recurses
        return  # not an object of lists: the full parse and validation say what is wrong
    for key, items in lists.items():
        if len(items) > max_items[key]:
            raise InvalidInput(
                [FieldError(None, key, f"at most {max_items[key]} rows per request, got {len(items)}")]
            )


def _lenient_loads(raw: bytes, orjson_error: Exception) -> Any:
    """json also accepts NaN/Infinity tokens, so validation can name the row and field they are in."""
    if "depth limit" in str(orjson_error):
        raise InvalidInput([FieldError(None, "body", "JSON nested deeper than 1,024 levels")])
    try:
        return json.loads(raw)
    except RecursionError:
        raise InvalidInput([FieldError(None, "body", "JSON nested too deeply")]) from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidInput([FieldError(None, "body", f"invalid JSON: {exc}")]) from None
