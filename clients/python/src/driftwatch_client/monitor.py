"""Monitor: a bounded queue in front of one background sender thread.

The caller's side (log_*) only encodes and appends under a lock: it never waits on the network
and never raises. The sender takes batches by count, bytes and age, and delivers each batch until
the server has answered for every row in it (or the row is dropped for a counted reason).
"""

from __future__ import annotations

import atexit
import logging
import os
import random
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from driftwatch_client import _arrays, _encode
from driftwatch_client._stats import Counters, Stats, logger
from driftwatch_client._transport import Transport, backoff_delay

__version__ = "0.1.0"

PREDICTIONS = "predictions"
LABELS = "labels"
_LIST_KEY = {PREDICTIONS: b"samples", LABELS: b"labels"}


class _Item(NamedTuple):
    kind: str
    body: bytes
    logged_at: float  # time.monotonic() when the caller logged it


class _Stop(Exception):
    """The close deadline passed: the sender stops where it is."""


_live: weakref.WeakSet[Monitor] = weakref.WeakSet()


def _reset_in_child() -> None:
    for monitor in list(_live):
        monitor._reset_after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_in_child)


class Monitor:
    """Logs one model's predictions and labels to a driftwatch server, in the background.

    url: the server's base URL (`https://drift.example.com`); token: an `ingest`-scope token;
    model: the registered model's name. Items wait in memory (at most `max_queue_size` of them
    and `max_queue_bytes` of encoded JSON, in flight included) and go out in batches of up to
    `batch_size` rows / `max_batch_bytes`, or once the oldest has waited `max_batch_age` seconds.
    Failed sends (connection errors, timeouts, 5xx, 408, 429) are retried with exponential backoff
    and jitter (`Retry-After` honoured) until an item is `give_up_after` seconds old.
    """

    def __init__(
        self,
        url: str,
        token: str,
        model: str,
        *,
        batch_size: int = 500,
        max_batch_bytes: int = 4 * 1024 * 1024,
        max_batch_age: float = 1.0,
        max_queue_size: int = 100_000,
        max_queue_bytes: int = 64 * 1024 * 1024,
        timeout: float = 30.0,
        backoff_base: float = 0.25,
        backoff_max: float = 10.0,
        retry_after_max: float = 60.0,
        give_up_after: float = 900.0,
        exit_timeout: float = 2.0,
        version: int | None = None,
        feature_names: Sequence[str] | None = None,
        classes: Sequence[Any] | None = None,
    ) -> None:
        if batch_size < 1 or max_queue_size < 1 or max_queue_bytes < 1 or max_batch_bytes < 1:
            raise ValueError("batch_size, max_batch_bytes, max_queue_size and max_queue_bytes must be ≥ 1")
        self.model = model
        self.batch_size = batch_size
        self.max_batch_bytes = max_batch_bytes
        self.max_batch_age = max_batch_age
        self.max_queue_size = max_queue_size
        self.max_queue_bytes = max_queue_bytes
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.retry_after_max = retry_after_max
        self.give_up_after = give_up_after
        self.exit_timeout = exit_timeout
        self.version = version
        self.feature_names = list(feature_names) if feature_names is not None else None
        self.classes = list(classes) if classes is not None else None
        self._url, self._token, self._timeout = url, token, timeout
        Transport(url, token, timeout, "")  # a malformed url fails here, at construction
        self._paths = {kind: f"/api/v1/models/{model}/{kind}" for kind in (PREDICTIONS, LABELS)}
        self._closed = False
        self._reset()
        _live.add(self)
        atexit.register(self._at_exit)

    # ---- state (fresh at construction and in a forked child) ----

    def _reset(self) -> None:
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)  # the sender waits for work here
        self._done = threading.Condition(self._lock)  # flush() waits for progress here
        self._queue: deque[_Item] = deque()
        self._held = 0  # items queued or in flight
        self._held_bytes = 0
        self._enqueued = 0  # items ever accepted into the queue (a sequence number)
        self._finished = 0  # of those, sent or dropped, in order
        self._taken = 0  # of those, handed to the sender
        self._flush_through = 0  # send at once (no batching wait) up to this sequence number
        self._stopping = self._closed  # close(): drain, then exit
        self._abandoned = False  # close() deadline passed: stop now
        self._thread: threading.Thread | None = None
        self._counters = Counters()
        self._rng = random.Random()
        self._transport = Transport(self._url, self._token, self._timeout, f"driftwatch-client/{__version__}")

    def _reset_after_fork(self) -> None:
        """The child starts empty: the parent's queued items are the parent's to send, once."""
        self._reset()

    def _check_pid(self) -> None:
        # Called before taking the lock (a reset replaces it). A fork that skipped the at-fork hooks (uWSGI forks from C): the pid tells.
        if self._pid != os.getpid():
            self._reset()

    # ---- the caller's side: never blocks on the network, never raises ----

    def log_prediction(
        self,
        id: Any,
        features: Any,
        prediction: Any,
        probabilities: Any = None,
        timestamp: _encode.Timestamp = None,
        *,
        version: int | None = None,
    ) -> None:
        """Queue one prediction; `timestamp` defaults to now. Returns at once."""
        try:
            if probabilities is not None and not isinstance(probabilities, dict) and self.classes:
                probabilities = _arrays.probability_rows([_arrays.to_list(probabilities)], self.classes)[0]
            body = _encode.encode_sample(
                id,
                features,
                prediction,
                probabilities,
                timestamp,
                version if version is not None else self.version,
            )
        except Exception as exc:
            self._count_drop("invalid", 1, f"prediction {id!r} not sent: {exc}")
            return
        self._put(PREDICTIONS, body)

    def log_label(self, id: Any, label: Any, timestamp: _encode.Timestamp = None) -> None:
        """Queue the ground truth of sample `id` (before or after its prediction). Returns at once."""
        try:
            body = _encode.encode_label(id, label, timestamp)
        except Exception as exc:
            self._count_drop("invalid", 1, f"label {id!r} not sent: {exc}")
            return
        self._put(LABELS, body)

    def log_batch(
        self,
        ids: Any,
        X: Any,
        y_pred: Any,
        proba: Any = None,
        *,
        timestamps: Any = None,
        feature_names: Sequence[str] | None = None,
        classes: Sequence[Any] | None = None,
    ) -> None:
        """Queue a scikit-learn / torch batch: `X` a DataFrame, 2-D array or tensor (with
        feature_names) or a list of dicts; `y_pred` predict()'s output; `proba` predict_proba()'s
        (n, k) output, columns in `classes` order (e.g. model.classes_)."""
        try:
            rows = self._batch_rows(ids, X, y_pred, proba, timestamps, feature_names, classes)
        except Exception as exc:
            self._count_drop("invalid", _length(ids), f"batch not sent: {exc}")
            return
        for sample_id, features, prediction, probabilities, ts in rows:
            self.log_prediction(sample_id, features, prediction, probabilities, ts)

    def _batch_rows(
        self,
        ids: Any,
        X: Any,
        y_pred: Any,
        proba: Any,
        timestamps: Any,
        feature_names: Sequence[str] | None,
        classes: Sequence[Any] | None,
    ) -> list[tuple[Any, Any, Any, Any, Any]]:
        id_list = _arrays.to_list(ids)
        names = _arrays.to_list(feature_names) if feature_names is not None else self.feature_names
        labels = _arrays.to_list(classes) if classes is not None else self.classes
        columns: list[list[Any]] = [
            id_list,
            _arrays.feature_rows(X, names),
            _arrays.predictions(y_pred),
            _arrays.probability_rows(proba, labels) if proba is not None else [None] * len(id_list),
            _arrays.to_list(timestamps) if timestamps is not None else [None] * len(id_list),
        ]
        lengths = {len(c) for c in columns}
        if len(lengths) != 1:
            what = ("ids", "X", "y_pred", "proba", "timestamps")
            raise ValueError(
                "lengths differ: " + ", ".join(f"{n}={len(c)}" for n, c in zip(what, columns, strict=True))
            )
        return list(zip(*columns, strict=True))

    def _put(self, kind: str, body: bytes) -> None:
        warning = None
        try:
            self._check_pid()
            with self._lock:
                if self._stopping:
                    warning = self._counters.drop("shutdown", 1, "logged after close()")
                elif self._held >= self.max_queue_size or self._held_bytes + len(body) > self.max_queue_bytes:
                    warning = self._counters.drop("queue_full", 1)
                else:
                    self._queue.append(_Item(kind, body, time.monotonic()))
                    self._held += 1
                    self._held_bytes += len(body)
                    self._enqueued += 1
                    if len(self._queue) == self.batch_size:
                        self._wake.notify()
                    if self._thread is None:
                        self._start_thread()
        except Exception:  # never into the caller
            logger.exception("driftwatch_client: could not queue an item")
        if warning:
            logger.warning("driftwatch_client %s", warning)

    def _count_drop(self, reason: str, n: int, message: str = "") -> None:
        with self._lock:
            warning = self._counters.drop(reason, n, message)
        if warning:
            logger.warning("driftwatch_client %s", warning)

    # ---- flush / close / stats ----

    def flush(self, timeout: float | None = 5.0) -> bool:
        """Send everything logged so far now; wait at most `timeout` s. True if all of it was
        answered for (sent, or dropped for a counted reason) in time."""
        try:
            deadline = None if timeout is None else time.monotonic() + timeout
            self._check_pid()
            with self._lock:
                target = self._enqueued
                self._flush_through = max(self._flush_through, target)
                self._wake.notify()
                return self._wait_for(lambda: self._finished >= target, deadline)
        except Exception:
            logger.exception("driftwatch_client: flush failed")
            return False

    def _wait_for(self, predicate: Callable[[], bool], deadline: float | None) -> bool:
        while not predicate():
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return False
            self._done.wait(remaining)
        return True

    def close(self, timeout: float | None = 5.0) -> bool:
        """Flush (at most `timeout` s), then stop the sender; what is still unsent is dropped
        as `shutdown`. Later log_* calls are dropped as `shutdown` too. Idempotent."""
        try:
            delivered = self._close(timeout)
        except Exception:
            logger.exception("driftwatch_client: close failed")
            return False
        atexit.unregister(self._at_exit)
        return delivered

    def _close(self, timeout: float | None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        self._check_pid()
        with self._lock:
            self._closed = self._stopping = True
            self._flush_through = self._enqueued
            self._wake.notify()
            delivered = self._wait_for(lambda: self._finished >= self._enqueued, deadline)
            warning = None
            if not delivered:
                self._abandoned = True
                self._wake.notify()
                self._done.notify_all()  # a sender sleeping out a backoff
                left = self._enqueued - self._finished
                self._finished = self._enqueued
                warning = self._counters.drop("shutdown", left, f"{left} unsent at the close deadline")
                self._held = self._held_bytes = 0
                self._queue.clear()
        if warning:
            logger.warning("driftwatch_client %s", warning)
        return delivered

    def _at_exit(self) -> None:
        # A hard deadline: the sender is a daemon thread, so nothing here can hang shutdown.
        self.close(self.exit_timeout)

    def stats(self) -> Stats:
        """A snapshot of the counters (sent, retried, dropped by reason, still queued)."""
        self._check_pid()
        with self._lock:
            return self._counters.snapshot(self._held, self._held_bytes)

    # ---- the sender thread ----

    def _start_thread(self) -> None:
        self._thread = threading.Thread(target=self._run, name="driftwatch-client", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            try:
                batch = self._next_batch()
                if batch is None:
                    break
                self._send(batch)
            except _Stop:
                break
            except Exception:  # a bug here must not kill the thread and silently stop sending
                logger.exception("driftwatch_client: sender error")
                time.sleep(1.0)
        self._transport.close()

    def _next_batch(self) -> list[_Item] | None:
        with self._lock:
            while True:
                if self._abandoned or self._pid != os.getpid():
                    return None
                if self._queue:
                    wait = self._batch_wait()
                    if wait <= 0:
                        return self._take()
                    self._wake.wait(wait)
                elif self._stopping:
                    return None
                else:
                    self._wake.wait()

    def _batch_wait(self) -> float:
        """Seconds until the queue's head batch is due (≤ 0: now)."""
        if len(self._queue) >= self.batch_size or self._stopping or self._taken < self._flush_through:
            return 0.0
        return self._queue[0].logged_at + self.max_batch_age - time.monotonic()

    def _take(self) -> list[_Item]:
        batch = [self._queue.popleft()]
        size = len(batch[0].body)
        while (
            self._queue
            and len(batch) < self.batch_size
            and size + len(self._queue[0].body) <= self.max_batch_bytes
        ):
            item = self._queue.popleft()
            batch.append(item)
            size += len(item.body)
        self._taken += len(batch)
        return batch

    def _send(self, batch: list[_Item]) -> None:
        for kind in (PREDICTIONS, LABELS):  # predictions first: their labels then match at once
            items = [item for item in batch if item.kind == kind]
            if items:
                self._deliver(kind, items)
        with self._lock:
            if not self._abandoned:
                self._finished += len(batch)
                self._held -= len(batch)
                self._held_bytes -= sum(len(item.body) for item in batch)
                self._done.notify_all()

    def _deliver(self, kind: str, items: list[_Item]) -> None:
        """Until the server has answered for every item (or each is dropped, counted)."""
        attempt = 0
        while items:
            self._stop_if_abandoned()
            body = b'{"%s":[' % _LIST_KEY[kind] + b",".join(item.body for item in items) + b"]}"
            outcome = self._transport.post(self._paths[kind], body)
            with self._lock:
                self._counters.requests += 1
            if outcome.kind == "ok":
                self._count_sent(kind, len(items), outcome.body)
                return
            if outcome.kind == "retry":
                attempt += 1
                if not self._wait_to_retry(items, attempt, outcome.retry_after, outcome.error):
                    return
            elif outcome.kind == "invalid":
                items = self._without_bad_rows(kind, items, outcome.bad_rows(), outcome.error)
            elif outcome.kind == "too_large" and len(items) > 1:
                half = len(items) // 2
                self._deliver(kind, items[:half])
                items = items[half:]
            else:  # rejected, or one item too large on its own
                reason = "invalid" if outcome.kind == "too_large" else "rejected"
                self._count_drop(reason, len(items), f"{kind} refused: {outcome.error}")
                return

    def _stop_if_abandoned(self) -> None:
        if self._abandoned or self._pid != os.getpid():
            raise _Stop

    def _count_sent(self, kind: str, n: int, body: dict[str, Any]) -> None:
        with self._lock:
            if self._abandoned:  # close() already counted these as shutdown
                return
            if kind == PREDICTIONS:
                self._counters.predictions_sent += n
                self._counters.duplicates += int(body.get("duplicates") or 0)
            else:
                self._counters.labels_sent += n

    def _without_bad_rows(
        self, kind: str, items: list[_Item], bad: dict[int, str], error: str
    ) -> list[_Item]:
        """The 400 named these rows: drop them (counted, logged) and send the rest again. A 400
        naming no row of ours drops a single item, or halves the batch to find the bad one."""
        bad = {row: message for row, message in bad.items() if 0 <= row < len(items)}
        if not bad:
            if len(items) == 1:
                self._count_drop("invalid", 1, f"{kind} refused: {error}")
                return []
            half = len(items) // 2
            self._deliver(kind, items[:half])
            return items[half:]
        first = min(bad)
        self._count_drop("invalid", len(bad), f"{kind} row refused: {bad[first]}")
        return [item for row, item in enumerate(items) if row not in bad]

    def _wait_to_retry(self, items: list[_Item], attempt: int, retry_after: float | None, error: str) -> bool:
        """Sleep before the next try; False (items dropped as gave_up) once they are too old."""
        if retry_after is not None:
            delay = min(retry_after, self.retry_after_max) * self._rng.uniform(1.0, 1.1)
        else:
            delay = backoff_delay(attempt, self.backoff_base, self.backoff_max, self._rng)
        age = time.monotonic() - items[0].logged_at
        with self._lock:
            self._counters.last_error = error
            if age + delay > self.give_up_after:
                warning = self._counters.drop("gave_up", len(items), f"after {attempt} tries: {error}")
            else:
                self._counters.retried += 1
                warning = None
                deadline = time.monotonic() + delay
                self._wait_for(lambda: self._abandoned or time.monotonic() >= deadline, deadline)
        if warning:
            logger.warning("driftwatch_client %s", warning)
            return False
        self._stop_if_abandoned()
        return True

    def __repr__(self) -> str:
        return f"Monitor(model={self.model!r}, queued={self._held})"


def _length(value: Any) -> int:
    try:
        return len(value)
    except TypeError:
        return 1


logging.getLogger("driftwatch_client").addHandler(logging.NullHandler())
