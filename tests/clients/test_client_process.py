"""The client in a process of its own: the exit-time flush and its deadline, what it imports,
and its memory during an outage."""

import gc
import json
import socket
import subprocess
import sys
import textwrap
import time
import tracemalloc
from collections.abc import Iterator

import pytest
from driftwatch_client import Monitor

from tests.clients.conftest import CLIENT_SRC
from tests.clients.fake_server import FakeServer, fake_server
from tests.live import free_port


@pytest.fixture
def server() -> Iterator[FakeServer]:
    with fake_server() as s:
        yield s


def _run(script: str, timeout: float = 60) -> tuple[subprocess.CompletedProcess[str], float]:
    """Runs the script with the client importable; returns the process and its wall time from
    the script's last line (it prints time.time() just before the interpreter starts to exit)."""
    code = f"import sys; sys.path.insert(0, {str(CLIENT_SRC)!r})\n" + textwrap.dedent(script)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)
    ended = time.time()
    last = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else "nan"
    return done, ended - float(last)


LOG_AND_EXIT = """
    import logging, time
    from driftwatch_client import Monitor
    logging.basicConfig()
    monitor = Monitor(url={url!r}, token="t", model="churn", max_batch_age=60, exit_timeout={exit_timeout})
    for i in range(200):
        monitor.log_prediction(f"s{{i}}", {{"age": i}}, "yes")
    print(time.time())
"""


def test_items_still_queued_at_exit_are_sent_by_the_exit_time_flush(server: FakeServer) -> None:
    done, _ = _run(LOG_AND_EXIT.format(url=server.url, exit_timeout=10))
    assert done.returncode == 0, done.stderr
    assert sorted(server.ids()) == sorted(f"s{i}" for i in range(200))


def test_the_exit_time_flush_gives_up_at_its_deadline_when_the_server_is_down() -> None:
    done, exit_seconds = _run(LOG_AND_EXIT.format(url=f"http://127.0.0.1:{free_port()}", exit_timeout=1.0))
    assert done.returncode == 0, done.stderr
    assert 1.0 <= exit_seconds < 2.5
    assert "200 unsent at the close deadline" in done.stderr


def test_the_exit_time_flush_gives_up_at_its_deadline_when_the_server_never_answers() -> None:
    with socket.socket() as listener:  # accepts connections (the backlog) and never replies
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        done, exit_seconds = _run(LOG_AND_EXIT.format(url=url, exit_timeout=1.0))
    assert done.returncode == 0, done.stderr
    assert 1.0 <= exit_seconds < 2.5  # the request in flight (10 s timeout) does not hold exit


def test_logging_imports_neither_numpy_nor_torch_nor_pandas() -> None:
    done, _ = _run(
        f"""
        import json, sys, time
        from driftwatch_client import Monitor
        monitor = Monitor(url="http://127.0.0.1:{free_port()}", token="t", model="m", exit_timeout=0)
        monitor.log_prediction(1, {{"age": 3}}, "yes", {{"no": 0.5, "yes": 0.5}})
        monitor.log_batch([2], [{{"age": 4}}], ["no"])
        print(json.dumps(sorted(m for m in ("numpy", "torch", "pandas") if m in sys.modules)))
        print(time.time())
        """
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[0]) == []


def test_a_child_forked_without_the_at_fork_hooks_gets_its_own_queue_and_thread(server: FakeServer) -> None:
    # libc's fork() called straight from C (as uWSGI forks its workers) runs none of Python's
    # os.register_at_fork hooks: the monitor's pid check is what gives the child a fresh state.
    done, _ = _run(
        f"""
        import ctypes, os, time
        from driftwatch_client import Monitor
        monitor = Monitor(url={server.url!r}, token="t", model="churn", max_batch_age=60)
        for i in range(3):  # queued, the sender thread waiting, when the process forks
            monitor.log_prediction(f"parent-{{i}}", {{"age": i}}, "yes")
        # Let the sender thread finish starting and settle into its wait: a raw fork skips
        # CPython's own at-fork hooks too, so a fork while that thread still held threading's
        # start-up lock left the child unable to start any thread (1 run in 5 hung 60 s).
        time.sleep(0.5)
        pid = ctypes.PyDLL(None).fork()  # PyDLL: the GIL stays held across the call
        if pid == 0:
            ok = False
            try:
                for i in range(2):
                    monitor.log_prediction(f"child-{{i}}", {{"age": i}}, "no")
                ok = monitor.flush(5) and monitor.stats().sent == 2
            finally:
                os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
        print("child", os.waitstatus_to_exitcode(status))
        print("parent", monitor.flush(5), monitor.stats().sent)
        print(time.time())
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[:2] == ["child 0", "parent True 3"], done.stdout
    assert sorted(server.ids()) == ["child-0", "child-1", "parent-0", "parent-1", "parent-2"]


# The bound stated for an outage: traced memory grows by at most the queue's byte bound plus
# 256 bytes of bookkeeping per queued item (the item tuple, its bytes object header, the deque
# slot), and stops growing once the queue is full, however long the outage lasts.
PER_ITEM_OVERHEAD = 256


def test_memory_stops_growing_at_the_queue_bound_during_an_outage() -> None:
    max_size, max_bytes = 4_000, 512 * 1024
    monitor = Monitor(
        url=f"http://127.0.0.1:{free_port()}",
        token="t",
        model="churn",
        max_queue_size=max_size,
        max_queue_bytes=max_bytes,
        backoff_base=0.05,
        backoff_max=0.2,
    )
    features = {f"x{k}": k * 1.5 for k in range(8)} | {"city": "lyon"}
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        growth = []
        for round_ in range(5):  # 5 times what the queue holds
            for i in range(max_size):
                monitor.log_prediction(f"r{round_}-{i}", features, "yes", {"no": 0.2, "yes": 0.8})
            gc.collect()
            growth.append(tracemalloc.get_traced_memory()[0] - base)
        stats = monitor.stats()
    finally:
        tracemalloc.stop()
        monitor.close(0)
    assert stats.queued_bytes <= max_bytes and stats.queued <= max_size
    assert stats.dropped["queue_full"] == 5 * max_size - stats.queued
    assert max(growth) <= max_bytes + PER_ITEM_OVERHEAD * max_size, growth
    assert growth[-1] - growth[0] <= 0.05 * growth[0], growth  # flat once full
