"""The embedded broker under several processes at once, as `make run` uses it (web, worker,
trainer, beat): every message reaches exactly one consumer whole, and no binding is lost or read
half-written. kombu's own filesystem channel fails both (a consumer reading a message still being
written stopped the demo's trainer with a JSONDecodeError)."""

import multiprocessing
import os
import queue as stdlib_queue
import time
from pathlib import Path
from typing import Any

import pytest
from kombu import Connection, Exchange

from driftwatch.broker_transport import PART_SUFFIX

TRANSPORT = "driftwatch.broker_transport:Transport"
PRODUCERS, CONSUMERS, PER_PRODUCER = 4, 3, 150
PAYLOAD = "x" * 200_000  # large enough that a write takes several system calls' time


def options(root: Path) -> dict[str, Any]:
    return {
        "data_folder_in": str(root / "queue"),
        "data_folder_out": str(root / "queue"),
        "processed_folder": str(root / "processed"),
        "control_folder": str(root / "control"),
        "store_processed": False,
    }


def connection(root: Path) -> Connection:
    return Connection("filesystem://", transport=TRANSPORT, transport_options=options(root))


def produce(root: str, producer: int) -> None:
    with connection(Path(root)) as conn:
        box = conn.SimpleQueue("jobs")
        for index in range(PER_PRODUCER):
            box.put({"id": f"{producer}-{index}", "body": PAYLOAD})
        box.close()


def consume(root: str, done: Any, results: Any) -> None:
    seen: list[str] = []
    errors: list[str] = []
    with connection(Path(root)) as conn:
        box = conn.SimpleQueue("jobs")
        while True:
            try:
                message = box.get(block=False)
            except stdlib_queue.Empty:
                if done.is_set():
                    break
                time.sleep(0.001)
                continue
            except Exception as exc:  # the defect: a half-written message
                errors.append(repr(exc))
                continue
            body = message.payload
            if body["body"] != PAYLOAD:
                errors.append(f"{body['id']}: truncated body")
            seen.append(body["id"])
            message.ack()
        box.close()
    results.put((seen, errors))


def bind_many(root: str, worker: int, exchanges: int) -> None:
    with connection(Path(root)) as conn:
        channel = conn.channel()
        for number in range(exchanges):
            exchange = Exchange(f"fan{number}", type="fanout", channel=channel)
            exchange.declare()
            channel.queue_declare(f"q{worker}-{number}")
            channel.queue_bind(f"q{worker}-{number}", exchange=f"fan{number}", routing_key="")


def read_tables(root: str, exchanges: int, done: Any, results: Any) -> None:
    errors: list[str] = []
    with connection(Path(root)) as conn:
        channel = conn.channel()
        while not done.is_set():
            for number in range(exchanges):
                try:
                    channel.get_table(f"fan{number}")
                except Exception as exc:
                    errors.append(repr(exc))
    results.put(errors)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    for name in ("queue", "processed", "control"):
        (tmp_path / name).mkdir()
    return tmp_path


def test_concurrent_producers_and_consumers_deliver_each_message_once_and_whole(root: Path) -> None:
    context = multiprocessing.get_context("fork")
    done, results = context.Event(), context.Queue()
    consumers = [context.Process(target=consume, args=(str(root), done, results)) for _ in range(CONSUMERS)]
    producers = [context.Process(target=produce, args=(str(root), number)) for number in range(PRODUCERS)]
    for process in consumers + producers:
        process.start()
    for process in producers:
        process.join(60)
    done.set()
    outcomes = [results.get(timeout=60) for _ in consumers]
    for process in consumers:
        process.join(10)

    seen = [message_id for ids, _ in outcomes for message_id in ids]
    errors = [error for _, found in outcomes for error in found]
    assert errors == []
    expected = {f"{producer}-{index}" for producer in range(PRODUCERS) for index in range(PER_PRODUCER)}
    assert len(seen) == len(expected) and set(seen) == expected  # none lost, none twice
    assert sum(1 for ids, _ in outcomes if ids) >= 2  # the consumers really competed
    assert os.listdir(root / "queue") == []  # no message and no half-written part left behind


def test_a_message_being_written_is_invisible_to_consumers_and_queue_sizes(root: Path) -> None:
    with connection(root) as conn:
        box = conn.SimpleQueue("jobs")
        (root / "queue" / f".1_abc.jobs.msg.0{PART_SUFFIX}").write_text('{"half": ')  # a write in progress
        assert box.qsize() == 0
        with pytest.raises(stdlib_queue.Empty):
            box.get(block=False)
        box.put({"id": "whole"})
        assert box.qsize() == 1
        assert box.get(block=False).payload == {"id": "whole"}
        box.close()


def test_concurrent_bindings_are_all_kept_and_never_read_half_written(root: Path) -> None:
    context = multiprocessing.get_context("fork")
    workers, exchanges = 6, 25
    done, results = context.Event(), context.Queue()
    reader = context.Process(target=read_tables, args=(str(root), exchanges, done, results))
    reader.start()
    binders = [
        context.Process(target=bind_many, args=(str(root), worker, exchanges)) for worker in range(workers)
    ]
    for process in binders:
        process.start()
    for process in binders:
        process.join(60)
        assert process.exitcode == 0
    done.set()
    assert results.get(timeout=30) == []
    reader.join(10)

    with connection(root) as conn:
        channel = conn.channel()
        for number in range(exchanges):
            queues = {binding.queue for binding in channel.get_table(f"fan{number}")}
            assert queues == {f"q{worker}-{number}" for worker in range(workers)}
        Exchange("fan0", type="fanout", channel=channel).declare()
        channel.queue_declare("q0-0")
        channel.queue_bind("q0-0", exchange="fan0", routing_key="")  # already bound: the table is unchanged
        assert len(channel.get_table("fan0")) == workers
        channel.queue_delete("q0-0")
        assert "q0-0" not in {binding.queue for binding in channel.get_table("fan0")}
        assert len(channel.get_table("fan0")) == workers - 1
