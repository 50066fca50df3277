"""Strings that cannot be stored: NUL characters (PostgreSQL text) and lone UTF-16 surrogates."""

from typing import Any

from core.errors import FieldError

# Rows of a batch live under these keys: a bad string in samples[3].features.city is reported
# as row 3, field features.city, like every other validation error.
ROW_KEYS = frozenset({"samples", "labels", "rows"})


def string_problem(text: str) -> str | None:
    if "\x00" in text:
        return "must not contain NUL characters"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "must not contain lone surrogates (invalid Unicode)"
    return None


def first_bad_string(value: Any) -> FieldError | None:
    """The first key or string value that cannot be stored, with its row and field; no recursion."""
    stack: list[tuple[tuple[str | int, ...], Any]] = [((), value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, str):
            problem = string_problem(item)
            if problem:
                return _error(path, problem)
        elif isinstance(item, dict):
            for key, child in item.items():
                problem = string_problem(key)
                if problem:
                    return _error((*path, key), f"field name {problem}")
                stack.append(((*path, key), child))
        elif isinstance(item, list):
            stack.extend(((*path, i), child) for i, child in enumerate(item))
    return None


def _error(path: tuple[str | int, ...], message: str) -> FieldError:
    row = None
    if len(path) >= 2 and path[0] in ROW_KEYS and isinstance(path[1], int):
        row, path = path[1], path[2:]
    field = ""
    for part in path:
        field += f"[{part}]" if isinstance(part, int) else (f".{part}" if field else str(part))
    return FieldError(row, _printable(field) or "body", message)


def _printable(text: str) -> str:
    return text.encode("utf-8", "backslashreplace").decode("utf-8").replace("\x00", "\\x00")[:200]
