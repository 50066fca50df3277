"""A job's training checkpoint in the artifact storage, so a re-queued job resumes (issue 23).

``JobCheckpoints(job)`` is the engine's ``CheckpointStore``: one file per job, replaced at every
save, deleted when the job ends. Beside it, the moment the first attempt read its training data:
a resumed attempt reads the same window, so its rows (and the checkpoint's fingerprint) match.
"""

import json
import logging
import time
from datetime import datetime

from django.conf import settings
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage

from retraining.models import RetrainJob

logger = logging.getLogger(__name__)

FOLDER = "retrain-checkpoints"


class JobCheckpoints:
    def __init__(self, job: RetrainJob) -> None:
        # Named by id and creation time: a database reset that reuses ids never resumes another job.
        name = f"job-{job.pk}-{job.created_at:%Y%m%dT%H%M%S%f}"
        self.path = f"{FOLDER}/{name}.ckpt"
        self.window_path = f"{FOLDER}/{name}.json"
        self.every = float(settings.DRIFTWATCH_RETRAIN_CHECKPOINT_SECONDS)
        self.saved_at: float | None = None

    def load(self) -> bytes | None:
        for path in (self.path, f"{self.path}.new"):  # .new alone: killed between swap steps
            if default_storage.exists(path):
                with default_storage.open(path, "rb") as handle:
                    return bytes(handle.read())
        return None

    def due(self) -> bool:
        # Saved recently: an epoch of milliseconds neither builds nor writes a checkpoint each time.
        return self.saved_at is None or time.monotonic() - self.saved_at >= self.every

    def save(self, raw: bytes) -> None:
        self.saved_at = time.monotonic()
        # Written beside, then swapped in: a kill mid-save leaves the previous checkpoint whole
        # (a torn file fails to load and the run starts over, never resumes from garbage).
        if default_storage.exists(f"{self.path}.new"):
            default_storage.delete(f"{self.path}.new")
        fresh = default_storage.save(f"{self.path}.new", ContentFile(raw))
        default_storage.delete(self.path)
        with default_storage.open(fresh, "rb") as handle:
            default_storage.save(self.path, handle)
        default_storage.delete(fresh)

    def data_now(self, now: datetime) -> datetime:
        """The first attempt's "now" for the training window (``now`` is recorded if none is)."""
        if default_storage.exists(self.window_path):
            with default_storage.open(self.window_path, "rb") as handle:
                return datetime.fromisoformat(json.loads(handle.read())["now"])
        default_storage.save(self.window_path, ContentFile(json.dumps({"now": now.isoformat()}).encode()))
        return now

    def delete(self) -> None:
        for path in (self.path, f"{self.path}.new", self.window_path):
            if default_storage.exists(path):
                default_storage.delete(path)
