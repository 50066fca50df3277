"""What of the children's output reaches the run command's console, and what stays in the logs."""

import io
import subprocess
import sys
from pathlib import Path

from demo.console import MAX_BLOCK_LINES, Console, ConsoleFilter, LogPump
from tests.clock import at

WHEN = at(hours=18, minutes=55, seconds=9)
LOGGED = f"{WHEN:%Y-%m-%d %H:%M:%S},711"  # logging's asctime, as celery and Django write it
ACCESSED = f"{WHEN:%d/%b/%Y:%H:%M:%S} +0000"  # gunicorn's access log
GUNICORN = f"{WHEN:%Y-%m-%d %H:%M:%S} +0000"  # gunicorn's error log

ACCESS = f'127.0.0.1 - - [{ACCESSED}] "POST /api/v1/models/demo-churn/predictions HTTP/1.1" 200 31'
INFO = f"{LOGGED} INFO ForkPoolWorker-2 celery.app.trace: Task x succeeded in 0.01s: 0"
WARNING = f"{LOGGED} WARNING MainProcess monitoring.checks: check 7 of model 1 failed: boom"
GUNICORN_ERROR = f"[{GUNICORN}] [11317] [CRITICAL] WORKER TIMEOUT (pid:11322)"
GUNICORN_INFO = f"[{GUNICORN}] [11317] [INFO] Handling signal: term"


def shown(lines: list[str]) -> list[str]:
    console_filter = ConsoleFilter()
    return [line for line in lines if console_filter.shows(line)]


def test_access_logs_and_info_records_stay_off_the_console() -> None:
    assert shown([ACCESS, INFO, GUNICORN_INFO, "ingested batch 3: accepted=200 duplicates=0"]) == []


def test_warnings_and_errors_reach_the_console() -> None:
    assert shown([INFO, WARNING, ACCESS, GUNICORN_ERROR]) == [WARNING, GUNICORN_ERROR]


def test_a_traceback_reaches_the_console_whole_until_the_next_record() -> None:
    error = f"{LOGGED} ERROR ForkPoolWorker-1 celery.app.trace: Task failed"
    traceback = [
        "Traceback (most recent call last):",
        '  File "x.py", line 1, in <module>',
        "ValueError: boom",
    ]
    assert shown([error, *traceback, INFO, ACCESS]) == [error, *traceback]


def test_a_bare_traceback_outside_any_record_reaches_the_console() -> None:
    lines = ["Traceback (most recent call last):", '  File "manage.py", line 9', "OSError: refused"]
    assert shown([ACCESS, *lines]) == lines


def test_a_new_champion_reaches_the_console_without_the_traffic_lines_after_it() -> None:
    champion = "now serving champion v2 (retrain job #1)"
    assert shown([champion, "ingested batch 9: accepted=200 duplicates=0"]) == [champion]


def test_a_server_error_in_the_access_log_reaches_the_console() -> None:
    error = f'127.0.0.1 - - [{ACCESSED}] "GET /api/v1/models/x/checks HTTP/1.1" 500 145 "-" "curl"'
    assert shown([ACCESS, error]) == [error]


def test_known_harmless_warnings_stay_in_the_log_with_their_continuation_lines() -> None:
    kombu = f"{LOGGED} WARNING MainProcess kombu.connection: No hostname was supplied. Reverting to default 'localhost'"
    root = [
        "/v/celery/platforms.py:893: SecurityWarning: You're running the worker with superuser privileges: this is",
        "absolutely not recommended!",
        "User information: uid=0 euid=0 gid=0 egid=0",
    ]
    assert shown([kombu, *root, WARNING]) == [WARNING]


def test_a_long_traceback_is_cut_on_the_console_and_says_where_the_rest_is() -> None:
    console_filter = ConsoleFilter()
    lines = ["Traceback (most recent call last):"] + [f"  frame {i}" for i in range(MAX_BLOCK_LINES + 10)]
    decisions = [(console_filter.shows(line), console_filter.cut_here()) for line in lines]
    assert sum(show for show, _ in decisions) == MAX_BLOCK_LINES
    assert sum(cut for _, cut in decisions) == 1


def test_log_pump_writes_everything_to_the_file_and_the_trouble_to_the_console(tmp_path: Path) -> None:
    script = "import logging; print('ingested batch 1', flush=True); raise ValueError('boom')"
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert proc.stdout is not None
    out = io.StringIO()
    pump = LogPump("demo traffic", proc.stdout, tmp_path / "demo-traffic.log", Console(out))
    pump.start()
    proc.wait(30)
    pump.join(10)
    log = (tmp_path / "demo-traffic.log").read_text()
    assert "ingested batch 1" in log and "ValueError: boom" in log
    console = out.getvalue()
    assert "[demo traffic] Traceback (most recent call last):" in console
    assert "[demo traffic] ValueError: boom" in console
    assert "ingested batch 1" not in console
