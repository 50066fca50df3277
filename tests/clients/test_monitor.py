"""The client's batching, retries, drop accounting, flush/close and fork behaviour, against a
scripted HTTP server on 127.0.0.1 (fake_server.py). The live tests use the real platform."""

import logging
import os
import random
import time
from collections.abc import Iterator
from email.utils import formatdate
from typing import Any

import pytest
from driftwatch_client import DROP_REASONS, Monitor
from driftwatch_client._transport import backoff_delay, retry_after_seconds

from tests.clients.fake_server import FakeServer, fake_server
from tests.live import free_port, wait_until

# An epoch timestamp (an hour ago) the client passes through untouched. This file stays off
# tests.clock and the faketime rerun: libfaketime shifts the monotonic clock that the sender
# thread's timed waits use, and those waits then never time out (a libfaketime limit, no date).
STAMP = int(time.time()) - 3600


@pytest.fixture
def server() -> Iterator[FakeServer]:
    with fake_server() as s:
        yield s


def _monitor(url: str, **kwargs: Any) -> Monitor:
    settings: dict[str, Any] = {
        "batch_size": 10,
        "max_batch_age": 0.05,
        "backoff_base": 0.02,
        "backoff_max": 0.1,
    }
    settings.update(kwargs)
    return Monitor(url=url, token="secret", model="churn", **settings)


def _log(monitor: Monitor, n: int, prefix: str = "s") -> None:
    for i in range(n):
        monitor.log_prediction(f"{prefix}{i}", {"age": i, "city": "lyon"}, "yes", {"no": 0.25, "yes": 0.75})


def _dead_url() -> str:
    return f"http://127.0.0.1:{free_port()}"  # nothing listens there: connection refused


def test_full_batches_go_out_without_waiting_for_their_age(server: FakeServer) -> None:
    monitor = _monitor(server.url, max_batch_age=60)
    _log(monitor, 20)
    wait_until(lambda: len(server.received) == 2, 5, 0.01, "two batches")
    assert [len(r.rows) for r in server.received] == [10, 10]
    monitor.close()


def test_a_partial_batch_goes_out_once_its_oldest_item_is_max_batch_age_old(server: FakeServer) -> None:
    monitor = _monitor(server.url, batch_size=100, max_batch_age=0.3)
    start = time.monotonic()
    _log(monitor, 3)
    wait_until(lambda: len(server.received) == 1, 5, 0.01, "the batch")
    assert server.received[0].at - start >= 0.3
    assert server.received[0].ids == ["s0", "s1", "s2"]
    monitor.close()


def test_requests_carry_the_token_and_the_rows_as_the_api_expects(server: FakeServer) -> None:
    monitor = _monitor(server.url, version=3)
    monitor.log_prediction(7, {"age": 1.5}, "no", timestamp=STAMP)
    monitor.log_label(7, "yes")
    assert monitor.flush(5)
    predictions, labels = server.received
    assert predictions.path == "/api/v1/models/churn/predictions"
    assert predictions.headers["Authorization"] == "Bearer secret"
    assert predictions.rows == [
        {"id": 7, "timestamp": STAMP, "features": {"age": 1.5}, "prediction": "no", "version": 3}
    ]
    assert labels.path == "/api/v1/models/churn/labels"
    assert labels.rows[0]["id"] == 7 and labels.rows[0]["label"] == "yes"
    assert abs(labels.rows[0]["timestamp"] - time.time()) < 60  # stamped when logged, not when sent
    monitor.close()


def test_5xx_answers_are_retried_with_the_same_ids_until_accepted(server: FakeServer) -> None:
    server.answer((503, {"error": "database_unavailable"}, {}), (500, {}, {}))
    monitor = _monitor(server.url)
    _log(monitor, 5)
    assert monitor.flush(5)
    assert [r.ids for r in server.received] == [["s0", "s1", "s2", "s3", "s4"]] * 3
    stats = monitor.stats()
    assert (stats.sent, stats.retried, stats.dropped_total, stats.queued) == (5, 2, 0, 0)
    monitor.close()


def test_a_429_waits_for_its_retry_after(server: FakeServer) -> None:
    server.answer((429, {"error": "throttled"}, {"Retry-After": "1"}))
    monitor = _monitor(server.url)
    _log(monitor, 2)
    assert monitor.flush(5)
    first, second = server.received
    assert second.at - first.at >= 1.0
    assert monitor.stats().retried == 1
    monitor.close()


def test_a_503s_retry_after_is_honoured_up_to_retry_after_max(server: FakeServer) -> None:
    server.answer((503, {"error": "database_unavailable"}, {"Retry-After": "3600"}))
    monitor = _monitor(server.url, retry_after_max=0.5)
    _log(monitor, 2)
    assert monitor.flush(5)
    first, second = server.received
    assert 0.5 <= second.at - first.at < 3.0  # capped at 0.5 s (+ up to 10 % jitter), not an hour
    assert second.ids == first.ids == ["s0", "s1"]
    monitor.close()


def test_connection_errors_are_retried_until_the_server_comes_up() -> None:
    port = free_port()
    monitor = _monitor(f"http://127.0.0.1:{port}")
    _log(monitor, 4)
    wait_until(lambda: monitor.stats().retried >= 3, 5, 0.01, "retries against a closed port")
    later = FakeServer()
    later.start(port)
    try:
        assert monitor.flush(5)
        assert later.ids() == ["s0", "s1", "s2", "s3"]
        assert monitor.stats().dropped_total == 0
    finally:
        monitor.close()
        later.stop()


def test_backoff_grows_exponentially_with_jitter_up_to_its_cap() -> None:
    rng = random.Random(1)
    for attempt, ceiling in [(1, 0.1), (2, 0.2), (3, 0.4), (4, 0.8), (8, 1.0), (40, 1.0)]:
        delays = [backoff_delay(attempt, 0.1, 1.0, rng) for _ in range(200)]
        assert ceiling * 0.5 <= min(delays) and max(delays) <= ceiling
        assert max(delays) - min(delays) > ceiling * 0.3  # jittered, not a fixed step


def test_retry_after_reads_seconds_and_http_dates() -> None:
    assert retry_after_seconds("7") == 7.0
    now = time.time()
    assert retry_after_seconds(formatdate(now + 40, usegmt=True), now=now) == pytest.approx(40, abs=1)
    assert retry_after_seconds("soon") is None
    assert retry_after_seconds(None) is None


def test_a_400_drops_the_rows_it_names_and_resends_the_rest(
    server: FakeServer, caplog: pytest.LogCaptureFixture
) -> None:
    errors = [
        {"row": 1, "field": "features.age", "message": "must be a number"},
        {"row": 3, "field": "prediction", "message": "unknown class 'maybe'"},
    ]
    server.answer((400, {"error": "invalid", "detail": "2 invalid value(s)", "errors": errors}, {}))
    monitor = _monitor(server.url)
    with caplog.at_level(logging.WARNING, logger="driftwatch_client"):
        _log(monitor, 5)
        assert monitor.flush(5)
    assert [r.ids for r in server.received] == [["s0", "s1", "s2", "s3", "s4"], ["s0", "s2", "s4"]]
    stats = monitor.stats()
    assert (stats.sent, stats.dropped["invalid"]) == (3, 2)
    assert "features.age: must be a number" in caplog.text
    monitor.close()


def test_a_400_naming_no_row_halves_the_batch_to_find_the_bad_item(server: FakeServer) -> None:
    refusal = (400, {"error": "invalid", "errors": [{"row": None, "field": "samples", "message": "bad"}]}, {})
    server.answer(refusal, refusal, (200, {"accepted": 1, "duplicates": 0}, {}))
    monitor = _monitor(server.url)
    _log(monitor, 2)
    assert monitor.flush(5)
    assert [r.ids for r in server.received] == [["s0", "s1"], ["s0"], ["s1"]]
    assert monitor.stats().dropped["invalid"] == 1
    monitor.close()


def test_a_413_splits_the_batch_and_each_half_is_sent(server: FakeServer) -> None:
    server.answer((413, {"error": "request_too_large"}, {}))
    monitor = _monitor(server.url)
    _log(monitor, 6)
    assert monitor.flush(5)
    assert [r.ids for r in server.received][1:] == [["s0", "s1", "s2"], ["s3", "s4", "s5"]]
    assert monitor.stats().sent == 6
    monitor.close()


def test_a_refused_token_drops_the_batch_as_rejected_without_retrying(server: FakeServer) -> None:
    server.answer((401, {"error": "not_authenticated", "detail": "invalid token"}, {}))
    monitor = _monitor(server.url)
    _log(monitor, 3)
    assert monitor.flush(5)
    stats = monitor.stats()
    assert (len(server.received), stats.dropped["rejected"], stats.retried) == (1, 3, 0)
    assert "invalid token" in stats.last_error
    monitor.close()


def test_a_full_queue_drops_new_items_by_count_and_counts_them() -> None:
    monitor = _monitor(_dead_url(), max_queue_size=5)
    _log(monitor, 8)
    stats = monitor.stats()
    assert (stats.queued, stats.dropped["queue_full"]) == (5, 3)
    monitor.close(0)


def test_a_full_queue_drops_new_items_by_bytes_and_counts_them() -> None:
    monitor = _monitor(_dead_url(), max_queue_bytes=1000)
    _log(monitor, 50)
    stats = monitor.stats()
    assert 0 < stats.queued_bytes <= 1000
    assert stats.queued + stats.dropped["queue_full"] == 50 and stats.dropped["queue_full"] > 30
    monitor.close(0)


def test_items_are_given_up_once_older_than_give_up_after() -> None:
    monitor = _monitor(_dead_url(), give_up_after=0.5)
    _log(monitor, 4)
    wait_until(lambda: monitor.stats().dropped["gave_up"] == 4, 5, 0.02, "give up")
    assert monitor.stats().queued == 0
    monitor.close(0)


def test_log_calls_never_raise_and_count_what_they_could_not_send(server: FakeServer) -> None:
    monitor = _monitor(server.url)
    monitor.log_prediction("a", {"blob": object()}, "yes")  # not JSON
    monitor.log_prediction("b", {"age": 1}, "yes", timestamp=[1, 2])  # type: ignore[arg-type]
    monitor.log_label("c", {1, 2})
    monitor.log_batch([1, 2], [[1.0], [2.0]], ["yes"])  # no feature names, lengths differ
    monitor.log_prediction("d", {"age": float("nan")}, "yes")  # NaN is sent as null
    assert monitor.flush(5)
    assert monitor.stats().dropped["invalid"] == 5
    assert server.received[0].rows[0]["features"] == {"age": None}
    monitor.close()
    monitor.log_prediction("e", {"age": 1}, "yes")
    assert monitor.stats().dropped["shutdown"] == 1
    assert set(monitor.stats().dropped) == set(DROP_REASONS)


def test_flush_returns_false_at_its_timeout_while_the_server_is_down() -> None:
    monitor = _monitor(_dead_url())
    _log(monitor, 3)
    start = time.monotonic()
    assert monitor.flush(0.3) is False
    assert 0.3 <= time.monotonic() - start < 1.0
    assert monitor.stats().queued == 3
    monitor.close(0)


def test_close_drops_what_is_still_unsent_at_its_deadline_as_shutdown() -> None:
    monitor = _monitor(_dead_url())
    _log(monitor, 3)
    start = time.monotonic()
    assert monitor.close(0.2) is False
    assert time.monotonic() - start < 1.0
    stats = monitor.stats()
    assert (stats.dropped["shutdown"], stats.queued, stats.sent) == (3, 0, 0)


def test_log_batch_reads_numpy_arrays_with_classes(server: FakeServer) -> None:
    import numpy as np

    monitor = _monitor(server.url)
    X = np.array([[30.0, 1.5], [41.0, 2.5]])
    proba = np.array([[0.9, 0.1], [0.2, 0.8]], dtype=np.float32)
    monitor.log_batch(np.array([10, 11]), X, np.array(["no", "yes"]), proba,
                      feature_names=["age", "income"], classes=np.array(["no", "yes"]))  # fmt: skip
    assert monitor.flush(5)
    rows = server.received[0].rows
    assert [(r["id"], r["features"], r["prediction"]) for r in rows] == [
        (10, {"age": 30.0, "income": 1.5}, "no"),
        (11, {"age": 41.0, "income": 2.5}, "yes"),
    ]
    assert rows[1]["probabilities"] == pytest.approx({"no": 0.2, "yes": 0.8})
    monitor.close()


def test_log_batch_reads_a_pandas_frame_and_series(server: FakeServer) -> None:
    import pandas as pd

    monitor = _monitor(server.url)
    X = pd.DataFrame({"age": [30, 41], "city": ["lyon", "paris"]})
    proba = pd.DataFrame({"no": [0.9, 0.2], "yes": [0.1, 0.8]})
    monitor.log_batch(pd.Series(["a", "b"]), X, pd.Series(["no", "yes"]), proba)
    assert monitor.flush(5)
    rows = server.received[0].rows
    assert rows[0]["features"] == {"age": 30, "city": "lyon"}
    assert rows[1]["probabilities"] == {"no": 0.2, "yes": 0.8}
    monitor.close()


def test_log_batch_reads_torch_tensors_that_require_grad(server: FakeServer) -> None:
    import torch

    monitor = _monitor(server.url, feature_names=["age", "income"], classes=["no", "yes"])
    X = torch.tensor([[30.0, 1.5], [41.0, 2.5]])
    logits = torch.tensor([[2.0, 0.0], [0.0, 2.0]], requires_grad=True)
    proba = torch.softmax(logits, dim=1)
    monitor.log_batch(torch.arange(2), X, proba.argmax(dim=1), proba)
    assert monitor.flush(5)
    rows = server.received[0].rows
    assert [(r["id"], r["prediction"]) for r in rows] == [(0, 0), (1, 1)]
    assert rows[0]["features"] == {"age": 30.0, "income": 1.5}
    assert rows[0]["probabilities"]["no"] == pytest.approx(0.8808, abs=1e-4)
    monitor.close()


def test_a_forked_child_sends_only_its_own_items_and_the_parent_sends_its_own_once(
    server: FakeServer,
) -> None:
    monitor = _monitor(server.url, max_batch_age=60)
    _log(monitor, 3, prefix="parent-")  # queued, not yet sent, when the process forks
    pid = os.fork()
    if pid == 0:  # the child: its own queue and sender thread
        ok = False
        try:
            _log(monitor, 2, prefix="child-")
            ok = monitor.flush(5) and monitor.stats().sent == 2
        finally:
            os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert monitor.flush(5)
    assert sorted(server.ids()) == ["child-0", "child-1", "parent-0", "parent-1", "parent-2"]
    assert monitor.stats().sent == 3
    monitor.close()


def test_an_array_of_probabilities_is_named_by_the_monitors_classes(server: FakeServer) -> None:
    import numpy as np

    classes = np.array(["no", "yes"])
    monitor = _monitor(server.url, classes=classes)
    proba = np.array([0.25, 0.75])
    monitor.log_prediction("r1", {"age": np.int64(41)}, classes[proba.argmax()], proba)
    assert monitor.flush(5)
    assert server.received[0].rows[0]["features"] == {"age": 41}
    assert server.received[0].rows[0]["prediction"] == "yes"
    assert server.received[0].rows[0]["probabilities"] == {"no": 0.25, "yes": 0.75}
    monitor.close()
