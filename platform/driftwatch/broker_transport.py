"""kombu's filesystem broker, made safe for the several processes of the embedded default.

kombu 5.7's filesystem channel has two races between processes sharing one folder:
- a message file is written in place, so a consumer can take it before its last byte is written
  and stop on a JSONDecodeError (seen: the trainer exiting at the demo's start);
- an exchange's binding table is truncated and rewritten in place, so a process reading it
  between the two can see it empty, and two processes binding at once can lose a binding.

Here a message is written under a name no consumer matches and renamed into the queue folder
whole; a consumer claims one by renaming it, which exactly one of several can do; a binding table
is changed under a lock file of its own and replaced whole, so a reader sees the old or the new
table, never a part. Message names keep kombu's `<ms>_<uuid>.<queue>.msg`, so its queue sizes,
purges and observability.broker's depths read them as before.
"""

import fcntl
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from queue import Empty
from time import monotonic
from typing import Any

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.json import dumps, loads

PART_SUFFIX = ".part"


def _write_whole(path: Path, data: bytes) -> None:
    """Write `data` to a hidden sibling of `path`, then rename it over `path` (atomic on POSIX)."""
    part = path.with_name(f".{path.name}.{uuid.uuid4().hex}{PART_SUFFIX}")
    try:
        with open(part, "wb") as handle:
            handle.write(data)
        os.replace(part, path)
    except BaseException:
        part.unlink(missing_ok=True)
        raise


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "a") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


class Channel(filesystem.Channel):  # type: ignore[misc]
    def _put(self, queue: str, payload: Any, **kwargs: Any) -> None:  # type: ignore[override]
        name = f"{round(monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"
        try:
            _write_whole(Path(self.data_folder_out) / name, dumps(payload).encode())
        except OSError as exc:
            raise ChannelError(f"Cannot add message {name!r} to {self.data_folder_out}") from exc

    def _get(self, queue: str, timeout: float | None = None) -> Any:
        wanted = f"{queue}.msg"
        inbox = Path(self.data_folder_in)
        claimed_dir = Path(self.processed_folder)
        for name in sorted(os.listdir(inbox)):
            if name.partition(".")[2] != wanted:
                continue
            claimed = claimed_dir / name
            try:
                os.rename(inbox / name, claimed)  # one consumer wins; the others find it gone
            except FileNotFoundError:
                continue
            try:
                payload = claimed.read_bytes()
                if not self.store_processed:
                    claimed.unlink()
            except OSError as exc:
                raise ChannelError(f"Cannot read message {claimed}") from exc
            return loads(payload.decode())
        raise Empty()

    def _queue_bind(self, exchange: str, routing_key: str, pattern: str, queue: str) -> None:
        binding = filesystem.exchange_queue_t(routing_key or "", pattern or "", queue or "")
        with self._table_changed(exchange) as table:
            if binding not in table:
                table.insert(0, binding)

    def _delete(
        self, queue: str, exchange: str, routing_key: str, pattern: str, *args: Any, **kwargs: Any
    ) -> None:
        super(filesystem.Channel, self)._delete(queue, exchange, routing_key, pattern, *args, **kwargs)
        binding = filesystem.exchange_queue_t(routing_key or "", pattern or "", queue or "")
        with self._table_changed(exchange) as table:
            while binding in table:
                table.remove(binding)

    @contextmanager
    def _table_changed(self, exchange: str) -> Iterator[list[Any]]:
        """The exchange's bindings, to change in place; written back whole under the table's lock."""
        file = self._exchange_file(exchange)
        self.control_folder.mkdir(parents=True, exist_ok=True)
        try:
            with _locked(file.with_name(f".{file.name}.lock")):
                table = self.get_table(exchange)
                before = list(table)
                yield table
                if table != before:
                    _write_whole(file, dumps(table).encode())
        except OSError as exc:
            raise ChannelError(f"Cannot change {file}") from exc


class Transport(filesystem.Transport):  # type: ignore[misc]
    Channel = Channel
