"""Per-hour summaries: what a compacted hour's counted features (``FeatureKind.counted``: a
categorical feature) are to the tests exact on their values, written with its part.

A compacted part carries, per counted feature, the counts of each value in the order of its
first row and the missing rows (``SamplePart.summary``). A window made of whole hours
(``window_counts``) merges its parts' counts in the order the window reads the parts, which
equals counting the column read whole: the chi-square, Z and Jensen-Shannon scores, the
drill-down's bars and the out-of-schema share and examples come out the same, to the last bit,
without reading the column. Tests that need the raw values (KS, Wasserstein, PCA, DLE, the
segments) still read it.

The summary is written in the compaction's swap, with the part's row: a window sees a part and
its summary together or neither. Retention's rewrite of a part keeps it. A part written by a
request (an hour still open, or a mask over its duplicates) has none, and a window holding one
reads its columns as before.
"""

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import pandas as pd
import pyarrow as pa

from monitoring.models import SamplePart
from monitoring.store.parts import FEATURE, hour_of
from registry.models import RegisteredModel
from registry.schema import model_schema
from workers.drift.summary import ColumnCounts, counts_from_json, counts_merge, counts_to_json

FORMAT = 1
# A feature of more distinct values in an hour, or of longer ones all told, is not summarised
# (its counts would outgrow the part's row); a window over that hour reads it.
MAX_KEYS = 10_000
MAX_KEY_CHARS = 1_000_000


def part_summary(model: RegisteredModel, table: pa.Table) -> dict[str, Any]:
    """The summary of a part's table: its counted features' counts, typed as a window reads them."""
    from monitoring.store.source import feature_values  # the source imports this module

    columns: dict[str, Any] = {}
    for name, kind in model_schema(model).feature_kinds.items():
        if not kind.counted or FEATURE + name not in table.column_names:
            continue
        values = pd.Series(feature_values(kind, table.column(FEATURE + name)), copy=False)
        counted = kind.counted_values(values)
        small = len(counted.counts) <= MAX_KEYS and sum(len(str(k)) for k in counted.counts) <= MAX_KEY_CHARS
        if small:
            columns[name] = {"missing": counted.missing, "counts": counts_to_json(counted.counts)}
    return {"version": FORMAT, "rows": len(table), "columns": columns}


def _whole_hour(value: datetime) -> bool:
    return hour_of(value) == value


def window_counts(
    parts: Sequence[Any], start: datetime | None, end: datetime, names: Sequence[str]
) -> dict[str, ColumnCounts]:
    """The window's counts of each of ``names`` its parts' summaries hold, merged in the order
    of ``parts`` (the window's); none unless the window is whole hours (its bounds on UTC
    hours) and every part is a summarised, unmasked one (``ListedPart``s)."""
    if not names or not parts or not _whole_hour(end) or (start is not None and not _whole_hour(start)):
        return {}
    if any(part.kept is not None for part in parts):
        return {}
    stored = dict(SamplePart.objects.filter(pk__in=[part.id for part in parts]).values_list("id", "summary"))
    summaries: list[dict[str, Any]] = []
    for part in parts:
        summary = stored.get(part.id)
        if summary is None or summary.get("version") != FORMAT or summary.get("rows") != part.rows:
            return {}  # a part without one (or not of its rows): the window reads its columns
        summaries.append(summary)
    found = {}
    for name in names:
        columns = [s["columns"].get(name) for s in summaries]
        if all(c is not None for c in columns):
            found[name] = counts_merge(
                [ColumnCounts(counts_from_json(c["counts"]), int(c["missing"])) for c in columns]
            )
    return found
