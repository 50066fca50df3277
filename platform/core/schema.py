"""OpenAPI post-processing: every API operation documents the error responses it can give.

All of them share one body (core.errors): {error, detail, errors: [{row, field, message}]}.
"""

from typing import Any

ERROR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["error", "detail", "errors"],
    "properties": {
        "error": {"type": "string", "description": "a stable code, e.g. invalid, not_found"},
        "detail": {"type": "string"},
        "error_count": {"type": "integer"},
        "errors": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "row": {"type": "integer", "nullable": True},
                    "field": {"type": "string"},
                    "message": {"type": "string"},
                },
            },
        },
    },
}

ERRORS = {
    "400": "invalid input: the field and row are named; nothing was stored",
    "401": "no or invalid token",
    "403": "the token's scope does not allow this",
    "404": "no such model (or object)",
    "413": "request body too large",
    "415": "the body is not application/json (or multipart where an upload is taken)",
    "429": "rate limited: retry after Retry-After seconds",
    "503": "database or broker unavailable: retry after Retry-After seconds",
}
WRITE_ERRORS = {"409": "conflicts with what exists (e.g. a model of that name)"}


def add_error_responses(result: dict[str, Any], generator: Any, request: Any, public: bool) -> dict[str, Any]:
    result.setdefault("components", {}).setdefault("schemas", {})["Error"] = ERROR_SCHEMA
    error = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
    for path, operations in result.get("paths", {}).items():
        if not path.startswith("/api/v1/"):
            continue
        for method, operation in operations.items():
            codes = ERRORS | (WRITE_ERRORS if method in ("post", "put", "patch") else {})
            responses = operation.setdefault("responses", {})
            for code, description in codes.items():
                responses.setdefault(code, {"description": description, **error})
    return result
