"""One check over many workers: a range window of more than DRIFTWATCH_CHECK_FANOUT_ROWS samples
(columnar store) fans out over slices of its hours.

The check's worker claims the row as always, cuts the window into slices of whole hours of about
DRIFTWATCH_CHECK_SLICE_ROWS samples (by the parts' row counts) and sends one ``check_slice`` task
per slice; any check worker takes one, reading only its hours' parts from the shared storage (S3
on several nodes). A slice measures what merges exactly, and places its hours' labels on its rows:
- an order-free feature (numerical): its finite values sorted, and its missing rows. Merged, the
  sorted blocks are the column's values in sorted order, which is all that KS, Wasserstein, the
  discrete tests and the drill-down read of it;
- a counted feature (categorical): its counts per value (from the hours' summaries when the slice
  is whole summarised hours), merged in the slices' order (``counts_merge``);
- the PCA: the sum of its rows' reconstruction errors, so the window's mean error is every row's
  (no sample).

The slice that finishes last (each one commits its file under a lock on the check's row, so
exactly one sees none left) sends ``check_merge``: it loads the window's predictions and
probabilities (its features deferred, read only by the segments, DLE and features of other types)
with the labels the slices placed (it reads none from the database: a 10M window's 5,000,000
labels are the slices' to read, each its hours'), puts the merged measures in place of those
features' columns and computes and stores the check as a single worker does
(``monitoring.checks``). A window whose rows changed between the slices and the merge (a late
sample in its hours) is checked whole there instead. A label that comes in between a slice's
read and the merge is not in the check; the labels' refresh of finished checks
(``check_labels_refresh``) takes it, as it takes any label that comes after a check.

A slice or merge task killed is redelivered and does nothing twice (compare-and-set on the
slice's file and on the check's attempt); a check taken over by the reaper (a newer attempt)
cuts new slices, and the older attempt's slices and merge stop at their first look at the row.
Each finished slice renews the row's ``started_at``, so a fan-out in progress is not taken for
dead.
"""

import io
import json
import logging
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial

import numpy as np
import pandas as pd
from django.conf import settings
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from django.db import transaction
from django.db.models import Sum
from django.utils import timezone

from core.enqueue import enqueue
from monitoring.models import CheckSlice, CheckState, QualityCheck, SamplePart
from monitoring.reference import reference_state
from monitoring.selectors import policy_for
from monitoring.store.collect import SLICES
from monitoring.store.parts import FEATURE, hour_of, written_stamp
from monitoring.store.retention import retention_note
from monitoring.store.source import PlacedLabels, feature_values, placed_join, slice_table, window_rows_bounds
from monitoring.store.summaries import window_counts
from monitoring.window import Window, WindowSpec
from registry.models import ReferenceDataset, RegisteredModel
from registry.schema import model_schema
from workers import queues
from workers.drift.summary import ColumnCounts, counts_from_json, counts_merge, counts_to_json

logger = logging.getLogger(__name__)
HOUR = timedelta(hours=1)


def fanout_slices(model: RegisteredModel, spec: WindowSpec) -> list[tuple[datetime, datetime]] | None:
    """The window's slices when its check fans out, else None: a range window, the columnar
    store, none of it past the payloads' retention, more than DRIFTWATCH_CHECK_FANOUT_ROWS
    samples at most (its parts' rows), two slices or more."""
    limit = settings.DRIFTWATCH_CHECK_FANOUT_ROWS
    if not limit or spec.start is None or spec.last_n is not None:
        return None
    if settings.DRIFTWATCH_SAMPLE_SOURCE != "columnar":
        return None
    if retention_note(policy_for(model), spec.start) is not None:
        return None  # its features are gone past the cutoff: one worker runs what is left
    bounds = window_rows_bounds(model, spec.start, spec.end)
    if bounds is None or bounds[1] <= limit:
        return None
    slices = hour_slices(model, spec.start, spec.end, settings.DRIFTWATCH_CHECK_SLICE_ROWS)
    return slices if len(slices) > 1 else None


def hour_slices(
    model: RegisteredModel, start: datetime, end: datetime, rows: int
) -> list[tuple[datetime, datetime]]:
    """[start, end) cut on hours into slices of at least ``rows`` samples (the last: the rest)."""
    hours = (
        SamplePart.objects.filter(
            model=model, retired_at__isnull=True, bucket__gte=hour_of(start), bucket__lt=end
        )
        .values("bucket")
        .annotate(rows=Sum("indexed"))
        .order_by("bucket")
    )
    cuts: list[datetime] = []
    held = 0
    for hour in hours:
        held += int(hour["rows"])
        if held >= rows and hour["bucket"] + HOUR < end:
            cuts.append(hour["bucket"] + HOUR)
            held = 0
    bounds = [start, *cuts, end]
    return list(zip(bounds[:-1], bounds[1:], strict=True))


def fanout_start(row: QualityCheck, slices: list[tuple[datetime, datetime]]) -> None:
    """The row's attempt's slices, each sent to a check worker after commit (once per attempt)."""
    with transaction.atomic():
        if CheckSlice.objects.filter(quality_check=row, attempt=row.attempts).exists():
            return  # this attempt fanned out already
        created = CheckSlice.objects.bulk_create(
            CheckSlice(quality_check=row, attempt=row.attempts, index=k, start=start, end=end)
            for k, (start, end) in enumerate(slices)
        )
        for piece in created:
            enqueue(queues.CHECK_SLICE, args=[piece.pk])
    logger.info("check %s fanned out: attempt %s, %s slices", row.pk, row.attempts, len(slices))


def check_current(check_id: int, attempt: int) -> bool:
    """The check is running this attempt still (not done, failed, or taken over)."""
    return QualityCheck.objects.filter(pk=check_id, state=CheckState.RUNNING, attempts=attempt).exists()


@dataclass
class SliceMeasures:
    """What a slice measured: its rows, per order-free feature its sorted finite values and
    missing rows, per counted feature its counts, the PCA's error sum (None: no PCA), and its
    labels placed on its rows."""

    rows: int
    sorted: dict[str, tuple[np.ndarray, int]]
    counts: dict[str, ColumnCounts]
    pca_sum: float | None
    reference_id: int | None  # the reference whose PCA scored it
    labels: PlacedLabels


def slice_measure(model: RegisteredModel, start: datetime, end: datetime) -> SliceMeasures:
    """Measure one slice of a window (its hours' parts), and place its labels on its rows."""
    kinds = model_schema(model).feature_kinds
    reference = reference_state(model=model)
    pca = None if reference is None else reference.multivariate
    order_free = [name for name, kind in kinds.items() if kind.order_free]
    counted = [name for name, kind in kinds.items() if kind.counted]
    needed = set(order_free) | set(counted) | set(pca.columns if pca is not None else ())
    table, labels, parts = slice_table(model, start, end, [name for name in kinds if name in needed])
    n = 0 if table is None else len(table)
    typed: dict[str, pd.Series] = {}

    def column(name: str) -> pd.Series:
        if name not in typed:
            assert table is not None
            typed[name] = pd.Series(feature_values(kinds[name], table.column(FEATURE + name)), copy=False)
        return typed[name]

    sorted_values: dict[str, tuple[np.ndarray, int]] = {}
    for name in order_free:
        values = column(name).to_numpy(dtype="float64") if n else np.empty(0)
        finite = values[np.isfinite(values)]
        sorted_values[name] = (np.sort(finite), int(n - finite.size))
    counts = window_counts(parts, start, end, counted) if n else {}
    for name in counted:
        if name not in counts:
            counts[name] = kinds[name].counted_values(column(name)) if n else ColumnCounts({}, 0)
    pca_sum = None
    if pca is not None:
        pca_sum = float(pca.errors(pd.DataFrame({c: column(c) for c in pca.columns})).sum()) if n else 0.0
    return SliceMeasures(
        n, sorted_values, counts, pca_sum, None if reference is None else reference.reference_id, labels()
    )


def _measures_bytes(measures: SliceMeasures) -> bytes:
    """An ``.npz`` without pickle: the sorted values and the labels as arrays, the rest as JSON."""
    arrays = {f"v{k}": values for k, (values, _) in enumerate(measures.sorted.values())}
    arrays["label"], arrays["received"] = measures.labels.label, measures.labels.received
    meta = {
        "rows": measures.rows,
        "sorted": [[name, missing] for name, (_, missing) in measures.sorted.items()],
        "counts": {
            name: {"missing": c.missing, "counts": counts_to_json(c.counts)}
            for name, c in measures.counts.items()
        },
        "pca_sum": measures.pca_sum,
        "reference_id": measures.reference_id,
        "parts": measures.labels.parts,
    }
    buffer = io.BytesIO()
    np.savez(buffer, __meta__=np.array(json.dumps(meta)), **arrays)  # type: ignore[arg-type]
    return buffer.getvalue()


@dataclass(frozen=True)
class _Stored:
    """A slice's measures as stored: its rows, PCA sum, counts and parts read; each order-free
    feature's sorted values (``values``) and its labels (``labels``) read from the file when
    asked for, one at a time."""

    name: str
    rows: int
    missing: dict[str, int]
    positions: dict[str, int]
    counts: dict[str, ColumnCounts]
    pca_sum: float | None
    reference_id: int | None
    parts: list[tuple[int, int]]

    def values(self, column: str) -> np.ndarray:
        with default_storage.open(self.name, "rb") as handle, np.load(handle, allow_pickle=False) as data:
            return np.asarray(data[f"v{self.positions[column]}"])

    def labels(self) -> PlacedLabels:
        with default_storage.open(self.name, "rb") as handle, np.load(handle, allow_pickle=False) as data:
            return PlacedLabels(self.parts, np.asarray(data["label"]), np.asarray(data["received"]))


def _measures_read(name: str) -> _Stored:
    with default_storage.open(name, "rb") as handle, np.load(handle, allow_pickle=False) as data:
        meta = json.loads(str(data["__meta__"]))
    counts = {
        column: ColumnCounts(counts_from_json(c["counts"]), int(c["missing"]))
        for column, c in meta["counts"].items()
    }
    return _Stored(
        name,
        int(meta["rows"]),
        {column: int(missing) for column, missing in meta["sorted"]},
        {column: k for k, (column, _) in enumerate(meta["sorted"])},
        counts,
        meta["pca_sum"],
        meta["reference_id"],
        [(int(part), int(rows)) for part, rows in meta["parts"]],
    )


def slice_run(slice_id: int) -> bool:
    """Measure a slice and commit its file; the last of its attempt's slices sends the merge.
    False when the check moved on (done, failed, or a newer attempt) or the slice was done."""
    piece = CheckSlice.objects.select_related("quality_check__model").filter(pk=slice_id).first()
    if piece is None or piece.result or not check_current(piece.quality_check_id, piece.attempt):
        return False
    row = piece.quality_check
    measures = slice_measure(row.model, piece.start, piece.end)
    name = default_storage.save(  # the collector's grace counts from the written stamp
        f"{SLICES}/{row.pk}/{written_stamp()}-{piece.attempt}-{piece.index}-{uuid.uuid4().hex}.npz",
        ContentFile(_measures_bytes(measures)),
    )
    with transaction.atomic():
        # The row's lock orders the slices' commits: exactly one sees that none is left.
        locked = QualityCheck.objects.select_for_update().filter(
            pk=row.pk, state=CheckState.RUNNING, attempts=piece.attempt
        )
        taken = locked.exists() and CheckSlice.objects.filter(pk=piece.pk, result="").update(result=name) == 1
        if taken:
            locked.update(started_at=timezone.now())  # the fan-out is alive: not for the reaper
            left = CheckSlice.objects.filter(quality_check=row, attempt=piece.attempt, result="")
            if not left.exists():
                enqueue(queues.CHECK_MERGE, args=[row.pk, piece.attempt])
    if not taken:
        default_storage.delete(name)
    logger.info(
        "check %s slice %s (%s rows): %s", row.pk, piece.index, measures.rows, "done" if taken else "dropped"
    )
    return taken


def slices_read(slices: list[CheckSlice]) -> list[_Stored]:
    """The slices' stored measures, in order (their arrays read when asked for)."""
    return [_measures_read(piece.result) for piece in slices]


def slices_labels(found: list[_Stored], model: RegisteredModel) -> PlacedLabels:
    """The labels the slices placed on their rows, as one (``window_load``'s ``labels``)."""
    return placed_join([stored.labels() for stored in found], model.is_classification)


def merged_window(window: Window, found: list[_Stored], model: RegisteredModel) -> bool:
    """Put the slices' merged measures in place of the features' columns (``Window.merged``,
    ``counts``, ``pca_sums``) → False, unchanged, when the slices' rows are not the window's, or
    a reference other than the model's active one scored them (one promoted meanwhile). A
    merged column is made when its tests ask for it, from each slice's block of it, and let go
    after (a 10M window's 20 merged columns are 1.6 GB: one per thread is held, not all)."""
    n = len(window.frame)
    if not found or sum(m.rows for m in found) != n:
        return False
    active = ReferenceDataset.objects.filter(model=model, is_active=True).values_list("pk", flat=True).first()
    if any(m.reference_id != active for m in found):
        return False

    def merged(name: str) -> pd.Series:
        # The slices' sorted blocks end to end, then the missing rows: the column's values in
        # another order. A test that needs them all sorted sorts them (the check's memo shares
        # it); past SAMPLE_ABOVE the distances and drill-down read a sample of them, not a sort.
        missing = sum(m.missing[name] for m in found)
        column = np.concatenate([*(m.values(name) for m in found), np.full(missing, np.nan)])
        return pd.Series(column, name=name, copy=False)

    for name in found[0].missing:
        window.merged[name] = partial(merged, name)
    for name in found[0].counts:
        window.counts[name] = counts_merge([m.counts[name] for m in found])
    sums = [m.pca_sum for m in found]
    if all(s is not None for s in sums):
        window.pca_sums = (float(sum(s for s in sums if s is not None)), n)
    return True


def slice_files_delete(check_id: int, attempt: int) -> None:
    """The files of the check's slices of this attempt and older ones (its result is stored, or
    it failed; a newer attempt's are its own merge's to read)."""
    done = CheckSlice.objects.filter(quality_check_id=check_id, attempt__lte=attempt).exclude(result="")
    for name in done.values_list("result", flat=True):
        default_storage.delete(name)


def slices_of(check_id: int, attempt: int) -> list[CheckSlice] | None:
    """The attempt's slices in order, None unless every one is done."""
    slices = list(CheckSlice.objects.filter(quality_check_id=check_id, attempt=attempt).order_by("index"))
    return slices if slices and all(piece.result for piece in slices) else None
