"""The file checkpoint store under a real kill -9: a save is never torn."""

import os
import signal
import subprocess
import sys
from pathlib import Path

from workers.training.checkpoint import FileStore

BLOB = 4 << 20  # a save takes long enough (write + fsync) for most kills to land inside one

# Saves blobs of one repeated byte (1, 2, 3, ...) forever, printing each number once it is saved.
SAVER = f"""
import sys
from workers.training.checkpoint import FileStore
store = FileStore(sys.argv[1])
for i in range(1, 10**6):
    store.save(bytes([i % 256]) * {BLOB})
    print(i, flush=True)
"""


def _kill_mid_saves(path: Path, after: int) -> int:
    proc = subprocess.Popen([sys.executable, "-c", SAVER, str(path)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    saved = 0
    while saved < after:
        saved = int(proc.stdout.readline())
    os.kill(proc.pid, signal.SIGKILL)
    out, _ = proc.communicate()  # what it reported before the signal landed
    assert proc.returncode == -signal.SIGKILL
    return max([saved, *map(int, out.split())])


def test_a_save_killed_with_sigkill_leaves_the_old_checkpoint_or_the_new_one_whole(tmp_path: Path) -> None:
    for after in range(1, 6):
        path = tmp_path / f"job{after}.ckpt"
        reported = _kill_mid_saves(path, after)
        raw = FileStore(path).load()
        assert raw is not None and len(raw) == BLOB and raw == raw[:1] * BLOB
        # the last save it reported, or one renamed into place just before the kill
        assert raw[0] in (reported, reported + 1)


def test_a_store_with_no_file_yet_loads_nothing(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "none.ckpt")
    assert store.load() is None
    store.save(b"state")
    assert store.load() == b"state" and store.saves == 1
