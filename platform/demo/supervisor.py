"""The run command's child processes: started in their own sessions with their output in
`var/log/<name>.log`, stopped within seconds, and never left running when the run ends.

Three ways a run can end without its children noticing, and what covers each:
- SIGINT or SIGTERM to the run itself: `children_stop` (a grace period, then SIGKILL to each
  child's whole process group, pool workers included);
- the run is killed outright (SIGKILL): each child gets SIGTERM from the kernel
  (`PR_SET_PDEATHSIG`, Linux);
- its parent goes away. GNU make, sent SIGINT alone, forwards nothing to its recipe and waits
  for it forever (only SIGTERM is forwarded); it shows that it is going down by resetting the
  signal's handler to the default. `ParentWatch` sees that, or the parent's death.
"""

import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from demo.console import Console, LogPump

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
TERMINATION_SIGNALS = (signal.SIGHUP, signal.SIGINT, signal.SIGTERM)
GRACE_SECONDS = 3.0  # then SIGKILL: a check cut short is redelivered, a training job re-queued


@dataclass
class Child:
    name: str
    proc: subprocess.Popen[bytes]
    pump: LogPump
    stop_signal: signal.Signals = signal.SIGTERM

    def running(self) -> bool:
        return self.proc.poll() is None


def _libc_prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    return ctypes.CDLL(None, use_errno=True).prctl  # type: ignore[no-any-return]


# Looked up once here: the child calls it between fork and exec, where nothing may be imported.
_PRCTL = _libc_prctl()


def _terminate_with_parent() -> None:
    """In the child before exec: SIGTERM when the run that started it dies (survives exec)."""
    if _PRCTL is not None:
        _PRCTL(PR_SET_PDEATHSIG, signal.SIGTERM)


def child_start(
    name: str,
    argv: list[str],
    *,
    cwd: str,
    env: dict[str, str],
    log_dir: Path,
    console: Console,
    stop_signal: signal.Signals = signal.SIGTERM,
) -> Child:
    """Start one service; its stdout and stderr go to `log_dir/<name>.log` through a LogPump.
    `stop_signal` asks it to stop at once (gunicorn: SIGINT; a Celery worker: SIGQUIT, a cold
    shutdown: its tasks are redelivered, acks are late)."""
    proc = subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        # Own session: a terminal's Ctrl-C reaches only the run, which stops children in order.
        start_new_session=True,
        preexec_fn=_terminate_with_parent,  # noqa: PLW1509  (no lock is taken: prctl was looked up above)
    )
    assert proc.stdout is not None
    pump = LogPump(name, proc.stdout, log_path(log_dir, name), console)
    pump.start()
    return Child(name, proc, pump, stop_signal)


def log_path(log_dir: Path, name: str) -> Path:
    return log_dir / f"{name.replace(' ', '-')}.log"


def children_stop(children: list[Child], *, grace: float = GRACE_SECONDS) -> list[str]:
    """Each one's stop signal (newest first), SIGKILL to each process group still there after `grace`
    seconds; returns the names that had to be killed. Their logs are flushed before returning."""
    for child in children:
        child.pump.echo = False  # "worker was sent SIGKILL" and the like are the stop itself
    for child in reversed(children):
        if child.running():
            child.proc.send_signal(child.stop_signal)
    deadline = time.monotonic() + grace
    killed = [child.name for child in reversed(children) if not _wait(child, deadline)]
    for child in children:
        _kill_group(child.proc.pid)  # pool workers and gunicorn workers left by a dead master
        child.proc.wait()
        child.pump.join(timeout=2)
    return killed


def _wait(child: Child, deadline: float) -> bool:
    try:
        child.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        return False
    return True


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # the whole group is gone already


def caught_signals(pid: int) -> int:
    """The bit mask of signals `pid` has a handler for (`SigCgt` in /proc; 0 where unreadable)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    for line in status.splitlines():
        if line.startswith("SigCgt:"):
            return int(line.split()[1], 16)
    return 0


def _signal_bits(signals: tuple[signal.Signals, ...]) -> int:
    return sum(1 << (int(sig) - 1) for sig in signals)


class ParentWatch:
    """Says when the process that started us is going away, so the run stops with it."""

    def __init__(self) -> None:
        self.parent = os.getppid()
        self.handled = caught_signals(self.parent) & _signal_bits(TERMINATION_SIGNALS)

    def parent_leaving(self) -> bool:
        if os.getppid() != self.parent:
            return True  # it died and we were re-parented
        # A handler reset to the default: the parent is in its fatal-signal path (make does
        # that, then waits for its children before it dies).
        return bool(self.handled & ~caught_signals(self.parent))


class StopFlag:
    """Set by SIGINT/SIGTERM/SIGHUP; the main loop polls it (handlers must not do the work)."""

    def __init__(self) -> None:
        self.event = threading.Event()
        for sig in TERMINATION_SIGNALS:
            if sig == signal.SIGHUP and signal.getsignal(sig) == signal.SIG_IGN:
                continue  # started under nohup: a closed terminal is not a reason to stop
            signal.signal(sig, self._set)

    def _set(self, signum: int, frame: object) -> None:
        self.event.set()

    def __call__(self) -> bool:
        return self.event.is_set()
