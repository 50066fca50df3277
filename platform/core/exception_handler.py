"""DRF's exception handler: every API error in the one JSON shape of core.errors.

Apart from core.errors because DRF's views (imported here) load the parser classes, and
core.parsers raises core.errors' InvalidInput.
"""

from dataclasses import asdict
from typing import Any

from rest_framework.response import Response
from rest_framework.views import exception_handler

from core.errors import InvalidInput

# A rejected batch reports at most this many row errors; the count says how many there were.
MAX_REPORTED_ERRORS = 100


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
