"""A tiny scripted ingestion server on 127.0.0.1 for the client's unit tests.

Each request takes the next scripted answer (status, body, headers), or 200 with the counts
the real server would give. Every request is recorded with its arrival time.
"""

import json
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Received:
    path: str
    rows: list[dict[str, Any]]
    headers: dict[str, str]
    at: float

    @property
    def ids(self) -> list[Any]:
        return [row["id"] for row in self.rows]


Answer = tuple[int, dict[str, Any], dict[str, str]]


class FakeServer:
    def __init__(self) -> None:
        self.received: list[Received] = []
        self.accepted: list[Received] = []
        self.script: deque[Answer] = deque()
        self._seen: set[tuple[str, Any]] = set()
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._httpd is not None
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def answer(self, *answers: Answer) -> None:
        self.script.extend(answers)

    def ids(self, path_end: str = "predictions") -> list[Any]:
        """Ids the server accepted (answered 200 for), in arrival order."""
        return [i for r in self.accepted if r.path.endswith(path_end) for i in r.ids]

    def handle(self, path: str, body: bytes, headers: dict[str, str]) -> Answer:
        payload = json.loads(body)
        rows = payload.get("samples") or payload.get("labels") or []
        received = Received(path, rows, headers, time.monotonic())
        with self._lock:
            self.received.append(received)
            if self.script:
                return self.script.popleft()
            self.accepted.append(received)
            if path.endswith("/labels"):
                return 200, {"matched": len(rows), "pending": 0}, {}
            fresh = [r["id"] for r in rows if ("p", r["id"]) not in self._seen]
            self._seen.update(("p", i) for i in fresh)
            return 200, {"accepted": len(fresh), "duplicates": len(rows) - len(fresh)}, {}

    def start(self, port: int = 0) -> None:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as gunicorn behind a proxy would

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                status, answer, headers = server.handle(self.path, body, dict(self.headers))
                data = json.dumps(answer).encode()
                self.send_response(status)
                for name, value in {"Content-Type": "application/json", **headers}.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._httpd.daemon_threads = True
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()


@contextmanager
def fake_server() -> Iterator[FakeServer]:
    server = FakeServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()
