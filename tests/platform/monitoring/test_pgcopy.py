"""The binary COPY stream built a column at a time equals the one written a row at a time with
struct (PostgreSQL's documented layout); tests/platform/monitoring/test_columns.py copies one
into PostgreSQL."""

import struct
from datetime import datetime, timedelta

import numpy as np
import pyarrow as pa

from monitoring.store import pgcopy
from tests.clock import T0


def _by_rows(rows: list[tuple[int | None, str, datetime, str, int]]) -> bytes:
    out = [pgcopy.HEADER]
    for version, text, ts, js, small in rows:
        out.append(struct.pack(">h", 5))
        out.append(struct.pack(">i", -1) if version is None else struct.pack(">iq", 8, version))
        raw = text.encode()
        out.append(struct.pack(">i", len(raw)) + raw)
        micros = (ts - pgcopy.PG_EPOCH) // timedelta(microseconds=1)
        out.append(struct.pack(">iq", 8, micros))
        raw = b"\x01" + js.encode()
        out.append(struct.pack(">i", len(raw)) + raw)
        out.append(struct.pack(">ii", 4, small))
    return b"".join(out) + pgcopy.TRAILER


def test_the_columns_make_the_stream_a_row_at_a_time_makes() -> None:
    t = T0 + timedelta(minutes=5, seconds=6, microseconds=789)  # 20,000 days earlier is before 2000
    rows = [
        (None, "日本", t, '"a"', 0),
        (2**40, "", t - timedelta(days=20_000), '{"k": "\\u00e9"}', -5),
        (-1, "tab\there", t + timedelta(microseconds=1), "1.5", 2**31 - 1),
    ]
    versions = np.array([0 if r[0] is None else r[0] for r in rows])
    texts = pa.array([r[1] for r in rows]).slice(0)  # an Arrow string column, as a part's
    data = (
        pgcopy.HEADER
        + pgcopy.copy_rows(
            [
                pgcopy.integers(versions, ">i8", null=np.array([r[0] is None for r in rows])),
                pgcopy.texts(pa.chunked_array([texts[:1], texts[1:]])),
                pgcopy.timestamps(pa.array([r[2] for r in rows], pa.timestamp("us", tz="UTC"))),
                pgcopy.texts(pa.array([r[3] for r in rows]), pgcopy.JSONB_VERSION),
                pgcopy.integers(np.array([r[4] for r in rows]), ">i4"),
            ]
        ).tobytes()
        + pgcopy.TRAILER
    )
    assert data == _by_rows(rows)
