"""The rows of an ingestion batch, read a chunk at a time.

A batch of 100,000 samples parsed whole into dicts took 26x its body's size; kept as raw spans
of the body (msgspec.Raw: a view, no objects) each row is decoded only when its chunk is read.
"""

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import msgspec
import orjson

# Rows decoded (and validated, and stored) at a time: one chunk of Python objects is alive at once.
CHUNK_ROWS = 1000


class Rows(Protocol):
    def __len__(self) -> int: ...

    def load(self, indices: Sequence[int]) -> list[Any]:
        """The rows at these indices, as JSON values."""
        ...


class UnreadableRow(Exception):  # noqa: N818 (not the client's error: the body is read again)
    """A row orjson cannot read alone (a NaN token, a lone surrogate, an integer past 64 bits):
    ``whole()`` parses the body whole, as ``core.api.json_body`` does (a 400 naming the body, or
    the body json reads), for the caller to start again with."""

    def __init__(self, whole: Callable[[], Any]) -> None:
        super().__init__("a row orjson cannot read: parse the body whole")
        self.whole = whole


@dataclass(frozen=True)
class RowSpans:
    """Rows kept as raw spans of the request body; orjson decodes each when it is loaded. Not
    read ahead (that decoded every row once more): a row orjson cannot read raises UnreadableRow
    when its chunk is loaded, so a service reads every row (its validation) before it stores
    anything, and its caller starts again with ``whole()``."""

    spans: list[msgspec.Raw]
    whole: Callable[[], Any]

    def __len__(self) -> int:
        return len(self.spans)

    def load(self, indices: Sequence[int]) -> list[Any]:
        # Each row wrapped as deep as it sits in the body ({"key": [row]}): orjson's depth limit
        # refuses it exactly where it refuses the body, at no measurable cost. One call a row: a
        # chunk's rows joined into one list took 0.7x the body more at the peak.
        try:
            return [orjson.loads(b"[[" + memoryview(self.spans[i]) + b"]]")[0][0] for i in indices]
        except orjson.JSONDecodeError:
            raise UnreadableRow(self.whole) from None


@dataclass(frozen=True)
class RowList:
    """Rows already parsed (a service called with a plain body)."""

    rows: list[Any]

    def __len__(self) -> int:
        return len(self.rows)

    def load(self, indices: Sequence[int]) -> list[Any]:
        return [self.rows[i] for i in indices]


def chunks(indices: Sequence[int], size: int = CHUNK_ROWS) -> Iterator[Sequence[int]]:
    for start in range(0, len(indices), size):
        yield indices[start : start + size]


def chunked_rows(rows: Rows, size: int = CHUNK_ROWS) -> Iterator[tuple[int, Any]]:
    """(index in the whole batch, row) for every row, decoding one chunk at a time."""
    for chunk in chunks(range(len(rows)), size):
        yield from zip(chunk, rows.load(chunk), strict=True)
