"""The run command's children never outlive it, however it ends."""

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.live import PLATFORM, ROOT, wait_until

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")

RUN = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from demo.console import Console
    from demo.supervisor import child_start
    child = child_start("sleeper", [sys.executable, "-c", "import time; time.sleep(120)"],
                        cwd=".", env={}, log_dir=Path(sys.argv[1]), console=Console())
    print(child.proc.pid, flush=True)
    time.sleep(120)
    """
)


def gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_children_of_a_run_killed_outright_are_stopped_by_the_kernel(tmp_path: Path) -> None:
    run = subprocess.Popen(
        [sys.executable, "-c", RUN, str(tmp_path)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": f"{PLATFORM}:{ROOT}"},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert run.stdout is not None
    child = int(run.stdout.readline())
    try:
        assert not gone(child)
        # The pump thread opens the log a moment after child_start returns: wait for it, so the
        # kill below lands on a run whose child is fully set up (under load that moment is long).
        wait_until((tmp_path / "sleeper.log").exists, 60, what="the sleeper's log")
        run.send_signal(signal.SIGKILL)  # no handler, no finally: only the kernel can tell the child
        run.wait(30)
        wait_until(lambda: gone(child), 30, interval=0.05, what="the orphaned child's end")
    finally:
        run.kill()
        if not gone(child):
            os.kill(child, signal.SIGKILL)
