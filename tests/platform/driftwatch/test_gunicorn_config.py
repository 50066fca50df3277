"""gunicorn's configuration hooks, run in a child process (the file sets the metrics folder in
the environment of whoever reads it)."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

FROZEN_AFTER_WORKER_INIT = """
import gc, runpy
config = runpy.run_path("platform/driftwatch/gunicorn_config.py")
before = gc.get_freeze_count()
config["post_worker_init"](None)
print(before, gc.get_freeze_count())
"""


def test_a_worker_freezes_its_start_up_objects_out_of_the_collector(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
    env["DRIFTWATCH_VAR_DIR"] = str(tmp_path)  # the metrics folder the file makes
    out = subprocess.run(
        [sys.executable, "-c", FROZEN_AFTER_WORKER_INIT],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    before, after = map(int, out.stdout.split())
    assert before == 0 and after > 1000
