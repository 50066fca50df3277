"""What the run command's terminal shows: the banner, a periodic status line, and from the
children's output only what needs a person (warnings, errors, tracebacks, a new champion).
Everything else each child writes goes to its log file under `var/log/`."""

import re
import sys
import threading
import time
from pathlib import Path
from typing import IO, Protocol

# A line that starts a log record: Django's format (settings.LOGGING), gunicorn's, or an access
# log line (a 5xx there counts as an error).
DJANGO_RECORD = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ (?P<level>[A-Z]+) ")
GUNICORN_RECORD = re.compile(r"^\[[^\]]+\] \[\d+\] \[(?P<level>[A-Z]+)\] ")
ACCESS_RECORD = re.compile(r'^\S+ \S+ \S+ \[[^\]]+\] "[^"]*" (?P<status>\d{3}) ')
ALARMING_LEVELS = {"WARNING", "ERROR", "CRITICAL", "FATAL"}
# Output outside the log format that still means trouble: a traceback, a Python warning, an
# exception printed by a management command.
ALARMING_TEXT = re.compile(r"^Traceback |^\S+:\d+: \w*Warning: |^[\w.]*(Error|Exception)\b")
# Lines a person running the demo wants to see although they are not warnings.
NOTABLE_TEXT = re.compile(r"^now serving champion|^champion poll failed")
# Known warnings that are not failures, kept in the log files only: kombu's filesystem broker
# has no host name; Celery's advice against running as root (containers do).
BENIGN = (
    "No hostname was supplied. Reverting to default 'localhost'",
    "SecurityWarning: You're running the worker with superuser privileges",
)
MAX_BLOCK_LINES = 40  # a traceback longer than this is cut on the console (the log has it all)


class Writable(Protocol):
    def write(self, text: str, /) -> object: ...
    def flush(self) -> None: ...


class Console:
    """The terminal, shared by the main loop and the log pumps' threads."""

    def __init__(self, stream: Writable | None = None) -> None:
        self.stream = stream or sys.stdout
        self.lock = threading.Lock()

    def say(self, text: str) -> None:
        with self.lock:
            self.stream.write(text if text.endswith("\n") else text + "\n")
            self.stream.flush()


def record_level(line: str) -> str | None:
    """The level of a line that starts a log record, None for a continuation or free text."""
    match = DJANGO_RECORD.match(line) or GUNICORN_RECORD.match(line)
    if match:
        return match["level"]
    access = ACCESS_RECORD.match(line)
    if access:
        return "ERROR" if access["status"].startswith("5") else "INFO"
    return None


class ConsoleFilter:
    """Decides, line by line, what of one child's output also reaches the console. A record
    worth showing carries its continuation lines (a traceback) with it, up to MAX_BLOCK_LINES."""

    def __init__(self) -> None:
        self.showing = False
        self.shown_in_block = 0

    def shows(self, line: str) -> bool:
        level = record_level(line)
        if level is None and not self.showing and NOTABLE_TEXT.match(line):
            return True  # one line, no block: what follows it is ordinary output
        if level is not None or not self.showing:
            self.showing = self._starts_block(line, level)
            self.shown_in_block = 0
        self.shown_in_block += self.showing
        return self.showing and self.shown_in_block <= MAX_BLOCK_LINES

    def cut_here(self) -> bool:
        """True on the first line of a block that the console no longer shows."""
        return self.showing and self.shown_in_block == MAX_BLOCK_LINES + 1

    @staticmethod
    def _starts_block(line: str, level: str | None) -> bool:
        if any(text in line for text in BENIGN):
            return False
        if level is not None:
            return level in ALARMING_LEVELS
        return bool(ALARMING_TEXT.match(line))


class LogPump(threading.Thread):
    """Copies one child's output into its log file, and what ConsoleFilter picks to the console."""

    def __init__(self, name: str, source: IO[bytes], path: Path, console: Console) -> None:
        super().__init__(name=f"log pump: {name}", daemon=True)
        self.label, self.source, self.path, self.console = name, source, path, console
        self.filter = ConsoleFilter()
        self.echo = True  # off while the run stops its children: what they say then is in the log

    def run(self) -> None:
        with self.path.open("ab") as log:
            log.write(f"==== {time.strftime('%Y-%m-%d %H:%M:%S')} started by run_platform\n".encode())
            for raw in iter(self.source.readline, b""):
                log.write(raw)
                log.flush()
                self._echo(raw.decode("utf-8", "replace").rstrip("\n"))

    def _echo(self, line: str) -> None:
        if not self.echo:
            return
        if self.filter.shows(line):
            self.console.say(f"[{self.label}] {line}")
        elif self.filter.cut_here():
            self.console.say(f"[{self.label}] … the rest is in {self.path}")
