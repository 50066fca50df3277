"""POST one JSON body and sort the answer into what the sender does next."""

from __future__ import annotations

import http.client
import json
import random
import time
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import urlsplit

# Worth sending again: the server or the way to it is (perhaps briefly) unavailable.
RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})


@dataclass(frozen=True)
class Outcome:
    """kind: ok | retry | invalid | too_large | rejected."""

    kind: str
    body: dict[str, Any] = field(default_factory=dict)
    status: int = 0
    retry_after: float | None = None
    error: str = ""

    def bad_rows(self) -> dict[int, str]:
        """Row index → the server's message, for each row a 400 names."""
        rows: dict[int, str] = {}
        for item in self.body.get("errors") or []:
            if isinstance(item, dict) and isinstance(item.get("row"), int):
                rows.setdefault(item["row"], f"{item.get('field')}: {item.get('message')}")
        return rows


def retry_after_seconds(value: str | None, now: float | None = None) -> float | None:
    """Retry-After as delta seconds or an HTTP date; None when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    return max(0.0, when - (time.time() if now is None else now))


def backoff_delay(attempt: int, base: float, cap: float, rng: random.Random) -> float:
    """Exponential backoff with jitter: base·2^(attempt-1), capped, then scaled by 50–100 %."""
    return min(cap, base * 2.0 ** min(attempt - 1, 30)) * rng.uniform(0.5, 1.0)


def _parse(data: bytes) -> dict[str, Any]:
    try:
        parsed = json.loads(data)
    except ValueError:
        return {"detail": data[:200].decode("utf-8", "replace")}
    return parsed if isinstance(parsed, dict) else {}


def classify(status: int, data: bytes, retry_after: str | None) -> Outcome:
    body = _parse(data)
    if 200 <= status < 300:
        return Outcome("ok", body, status)
    detail = str(body.get("detail") or body.get("error") or "")[:500]
    if status in RETRY_STATUSES:
        return Outcome("retry", body, status, retry_after_seconds(retry_after), f"HTTP {status} {detail}")
    if status == 400:
        return Outcome("invalid", body, status, error=detail)
    if status == 413:
        return Outcome("too_large", body, status, error=detail)
    return Outcome("rejected", body, status, error=f"HTTP {status} {detail}")


class Transport:
    """One keep-alive connection, owned by the sender thread (reopened after any error)."""

    def __init__(self, url: str, token: str, timeout: float, user_agent: str) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"url must be http(s)://host[:port][/prefix], got {url!r}")
        self.https = parts.scheme == "https"
        self.host = parts.hostname
        self.port = parts.port
        self.prefix = parts.path.rstrip("/")
        self.timeout = timeout
        self.headers = {
            "Content-Type": "application/json",
            "Authorization": f"Bearer {token}",
            "User-Agent": user_agent,
        }
        self._conn: http.client.HTTPConnection | None = None

    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is None:
            cls = http.client.HTTPSConnection if self.https else http.client.HTTPConnection
            self._conn = cls(self.host, self.port, timeout=self.timeout)
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _once(self, path: str, body: bytes) -> Outcome:
        conn = self._connection()
        conn.request("POST", self.prefix + path, body=body, headers=self.headers)
        response = conn.getresponse()
        data = response.read()
        if response.will_close:
            self.close()
        return classify(response.status, data, response.getheader("Retry-After"))

    def post(self, path: str, body: bytes) -> Outcome:
        """Never raises: a network failure is a retry outcome."""
        reused = self._conn is not None and self._conn.sock is not None
        for _ in range(2 if reused else 1):
            try:
                return self._once(path, body)
            except (OSError, http.client.HTTPException) as exc:  # timeouts are OSErrors
                # A timed-out request may have been stored: the retry is safe, the server dedups by id.
                # A kept-alive socket the server closed while idle fails at once: one fresh try.
                self.close()
                error = f"{type(exc).__name__}: {exc}"
        return Outcome("retry", error=error)
