"""A job's training checkpoint in the artifact storage, so a re-queued job resumes (issue 23).

``JobCheckpoints(job_id)`` is the engine's ``CheckpointStore``: one file per job, replaced at every
save, deleted when the job ends. Beside it, the moment the first attempt read its training data:
a resumed attempt reads the same window, so its rows (and the checkpoint's fingerprint) match.
"""

import json
import logging
from datetime import datetime

from django.core.files.base import ContentFile
from django.core.files.storage import default_storage

logger = logging.getLogger(__name__)

FOLDER = "retrain-checkpoints"


class JobCheckpoints:
    def __init__(self, job_id: int) -> None:
        self.job_id = job_id
        self.path = f"{FOLDER}/job-{job_id}.ckpt"
        self.window_path = f"{FOLDER}/job-{job_id}.json"

    def load(self) -> bytes | None:
        for path in (self.path, f"{self.path}.new"):  # .new alone: killed between swap steps
            if default_storage.exists(path):
                with default_storage.open(path, "rb") as handle:
                    return bytes(handle.read())
        return None

    def save(self, raw: bytes) -> None:
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
