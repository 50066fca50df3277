"""prometheus-client's multiprocess mode under gunicorn, with the dead workers' files folded away.

Each gunicorn worker writes its counters and histograms to its own files (`counter_<pid>.db`,
...) in PROMETHEUS_MULTIPROC_DIR, and a scrape sums every file there. The library's
`mark_process_dead` removes only live-gauge files, so each recycled worker leaves its files behind
for good: after thousands of recycles (max_requests, timeouts) every scrape reads thousands of
files. Here the master, in gunicorn's child_exit hook, adds a dead worker's values into one
archive file per type and deletes its files, so totals are kept and the folder stays small.

A scrape holds a shared lock on the folder and the fold an exclusive one: a scrape never sees a
dead worker's values twice (archive written, files not yet gone) or not at all. No Django here:
gunicorn's master runs this before any app is loaded.
"""

import fcntl
import glob
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ENV = "PROMETHEUS_MULTIPROC_DIR"
LOCK_NAME = ".lock"
ARCHIVE = "archive"
# Types whose values add up across processes. Gauges are not written by driftwatch processes
# (its gauges are read from the database at scrape time), and live gauges are the library's own.
SUMMED_TYPES = ("counter", "histogram", "summary")


def directory() -> Path | None:
    value = os.environ.get(ENV, "")
    return Path(value) if value else None


@contextmanager
def folder_lock(path: Path, *, exclusive: bool) -> Iterator[None]:
    with open(path / LOCK_NAME, "a+b") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def folder_prepare(path: Path) -> None:
    """An empty folder: files left by an earlier server would be counted again. Only the
    library's own files are removed (the folder may be one an operator named)."""
    path.mkdir(parents=True, exist_ok=True)
    for pattern in ("*.db", "*.tmp"):
        for name in path.glob(pattern):
            name.unlink(missing_ok=True)


def server_folder(base: Path, pid: int) -> Path:
    """The folder of one gunicorn master under `base` (servers side by side never mix their
    counts); folders of masters that are gone are removed first."""
    base.mkdir(parents=True, exist_ok=True)
    for old in base.glob("gunicorn-*"):
        other = old.name.removeprefix("gunicorn-")
        if other.isdigit() and not pid_alive(int(other)):
            shutil.rmtree(old, ignore_errors=True)
    path = base / f"gunicorn-{pid}"
    folder_prepare(path)
    return path


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _summed(files: list[str]) -> dict[str, float]:
    from prometheus_client.mmap_dict import MmapedDict  # the master imports it only once needed

    totals: dict[str, float] = {}
    for name in files:
        for key, value, _timestamp, _pos in MmapedDict.read_all_values_from_file(name):
            totals[key] = totals.get(key, 0.0) + value
    return totals


def _write(path: Path, values: dict[str, float]) -> None:
    from prometheus_client.mmap_dict import MmapedDict

    temporary = path.with_suffix(".tmp")  # not *.db: a scrape never reads it half-written
    temporary.unlink(missing_ok=True)
    out = MmapedDict(str(temporary))
    try:
        for key, value in values.items():
            out.write_value(key, value, 0.0)
    finally:
        out.close()
    os.replace(temporary, path)


def process_fold(pid: int, path: Path | None = None) -> int:
    """Add a dead process's counter, histogram and summary values into the archive files and
    delete its files (its live gauges too, as `mark_process_dead` does). Returns files removed."""
    path = path or directory()
    if path is None or not path.is_dir():
        return 0
    removed = 0
    with folder_lock(path, exclusive=True):
        for typ in SUMMED_TYPES:
            dead = glob.glob(str(path / f"{typ}_{pid}.db"))
            if not dead:
                continue
            archive = path / f"{typ}_{ARCHIVE}.db"
            existing = [str(archive)] if archive.exists() else []
            _write(archive, _summed(existing + dead))
            for name in dead:
                os.remove(name)
                removed += 1
        for name in glob.glob(str(path / f"gauge_live*_{pid}.db")):
            os.remove(name)
            removed += 1
    return removed
