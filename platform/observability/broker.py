"""Messages waiting per Celery queue, read from the broker itself (Redis or kombu's filesystem)."""

import os
from functools import lru_cache
from pathlib import Path
from typing import Any

from django.conf import settings

from retraining.models import GpuDevice
from workers import queues

# kombu's Redis transport keeps a queue as a list under its name, and a message sent with a
# priority under "<name>\x06\x16<step>" (its default steps; 0 is the plain name).
REDIS_PRIORITY_SEP = "\x06\x16"
REDIS_PRIORITY_STEPS = (3, 6, 9)
BROKER_TIMEOUT_SECONDS = 1.0  # a scrape must answer while Redis is down (the source reads as down)


def queue_names() -> list[str]:
    """The fixed queues and one per GPU device a worker reported (`train.<host>.<gpu>`)."""
    fixed = [queues.DEFAULT, queues.CHECKS, queues.TRAINING]
    return fixed + sorted(set(GpuDevice.objects.values_list("queue", flat=True)) - set(fixed))


def queue_depths() -> dict[str, int]:
    url = str(settings.CELERY_BROKER_URL)
    names = queue_names()
    if url.startswith(("redis://", "rediss://", "unix://")):
        return _redis_depths(url, names)
    if url.startswith("filesystem://"):
        folder = str(settings.CELERY_BROKER_TRANSPORT_OPTIONS["data_folder_in"])
        return _filesystem_depths(Path(folder), names)
    return {}  # another transport: not measured


@lru_cache(maxsize=4)
def _redis_client(url: str) -> Any:
    import redis  # only with a Redis broker

    return redis.Redis.from_url(
        url, socket_timeout=BROKER_TIMEOUT_SECONDS, socket_connect_timeout=BROKER_TIMEOUT_SECONDS
    )


def _redis_depths(url: str, names: list[str]) -> dict[str, int]:
    pipe = _redis_client(url).pipeline(transaction=False)
    keys = [(name, key) for name in names for key in _redis_keys(name)]
    for _, key in keys:
        pipe.llen(key)
    depths = dict.fromkeys(names, 0)
    for (name, _), length in zip(keys, pipe.execute(), strict=True):
        depths[name] += int(length)
    return depths


def _redis_keys(name: str) -> list[str]:
    return [name] + [f"{name}{REDIS_PRIORITY_SEP}{step}" for step in REDIS_PRIORITY_STEPS]


def _filesystem_depths(folder: Path, names: list[str]) -> dict[str, int]:
    """kombu names a message file `<ms>_<uuid>.<queue>.msg`: one listing of the folder."""
    depths = dict.fromkeys(names, 0)
    try:
        entries = os.listdir(folder)
    except FileNotFoundError:
        return depths
    for entry in entries:
        if entry.endswith(".msg"):
            queue = entry.removesuffix(".msg").split(".", 1)[-1]
            if queue in depths:
                depths[queue] += 1
    return depths
