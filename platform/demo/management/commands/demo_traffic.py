import json
import time
import urllib.error
import urllib.request
import uuid
from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand

from demo.services import demo_champion_artifact
from workers.demo import DEMO_CLASSES, DEMO_MODEL, TICKETS_MODEL, demo_frame, frame_rows, tickets_frame
from workers.training.artifacts import Predictor


class Command(BaseCommand):
    help = (
        "Post demo predictions (from the champion model, and the ticket router's) and, one batch "
        "later, their labels."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--url", default="http://127.0.0.1:8000")
        parser.add_argument("--token", required=True)
        parser.add_argument(
            "--read-token", default="", help="polls the champion and downloads a new one through the API"
        )
        parser.add_argument("--batch", type=int, default=200)
        parser.add_argument("--interval", type=float, default=5.0, help="seconds between batches")
        parser.add_argument("--drift-per-batch", type=float, default=0.01)
        parser.add_argument("--batches", type=int, default=0, help="stop after N batches (0: forever)")

    def handle(self, *args: Any, **opts: Any) -> None:
        clf = Predictor.from_bytes(demo_champion_artifact())
        serving = None
        run = uuid.uuid4().hex[:8]
        pending: list[dict[str, Any]] = []
        tickets_pending: list[dict[str, Any]] = []
        sent = 0
        while not opts["batches"] or sent < opts["batches"]:
            drift = min(1.0, sent * opts["drift_per_batch"])
            frame, labels = demo_frame(opts["batch"], drift=drift, seed=sent + 100)
            if opts["read_token"]:
                clf, serving = self._poll_champion(opts, clf, serving)
            proba = clf.outputs(frame)
            ids = [f"{run}-{sent}-{i}" for i in range(len(frame))]
            samples = [
                {
                    "id": sid,
                    "features": f,
                    "prediction": DEMO_CLASSES[int(p.argmax())],
                    "probabilities": {c: float(p[j]) for j, c in enumerate(DEMO_CLASSES)},
                }
                for sid, f, p in zip(ids, frame_rows(frame), proba, strict=True)
            ]
            result = self._post(opts, "predictions", {"samples": samples})
            labelled = self._post(opts, "labels", {"labels": pending}) if pending else {"matched": 0}
            pending = [{"id": sid, "label": y} for sid, y in zip(ids, labels, strict=True)]
            tickets_pending = self._tickets_batch(opts, f"{run}-{sent}", drift, sent, tickets_pending)
            sent += 1
            self.stdout.write(
                f"ingested batch {sent}: accepted={result['accepted']} duplicates={result['duplicates']} "
                f"labels matched={labelled['matched']} drift={drift:.2f}"
            )
            self.stdout.flush()
            time.sleep(opts["interval"])

    def _tickets_batch(
        self, opts: dict[str, Any], prefix: str, drift: float, sent: int, pending: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        """The ticket router's batch: its predictions now, the previous batch's labels."""
        frame, labels, predicted = tickets_frame(opts["batch"], drift=drift, seed=sent + 100)
        ids = [f"{prefix}-t{i}" for i in range(len(frame))]
        samples = [
            {"id": sid, "features": f, "prediction": p}
            for sid, f, p in zip(ids, frame_rows(frame), predicted, strict=True)
        ]
        self._post(opts, "predictions", {"samples": samples}, model=TICKETS_MODEL)
        if pending:
            self._post(opts, "labels", {"labels": pending}, model=TICKETS_MODEL)
        return [{"id": sid, "label": y} for sid, y in zip(ids, labels, strict=True)]

    def _poll_champion(
        self, opts: dict[str, Any], clf: Predictor, serving: int | None
    ) -> tuple[Predictor, int | None]:
        """A serving system's poll: a new champion version is downloaded through the API."""
        try:
            champion = json.loads(self._get(opts, "champion"))
            if champion["version"] == serving:
                return clf, serving
            loaded = Predictor.from_bytes(self._get(opts, "champion/artifact"))
        except (OSError, ValueError, KeyError) as exc:
            self.stderr.write(f"champion poll failed: {exc}")
            return clf, serving
        if serving is not None:
            self.stdout.write(f"now serving champion v{champion['version']} ({champion['made_by']})")
        return loaded, champion["version"]

    @staticmethod
    def _get(opts: dict[str, Any], what: str) -> bytes:
        request = urllib.request.Request(
            f"{opts['url']}/api/v1/models/{DEMO_MODEL}/{what}",
            headers={"Authorization": f"Bearer {opts['read_token']}"},
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            return bytes(response.read())

    @staticmethod
    def _post(
        opts: dict[str, Any], what: str, body: dict[str, Any], *, model: str = DEMO_MODEL
    ) -> dict[str, Any]:
        request = urllib.request.Request(
            f"{opts['url']}/api/v1/models/{model}/{what}",
            data=json.dumps(body).encode(),
            method="POST",
            headers={"Authorization": f"Bearer {opts['token']}", "Content-Type": "application/json"},
        )
        # Retries are safe: sample ids make the request idempotent.
        for attempt in range(5):
            try:
                with urllib.request.urlopen(request, timeout=30) as response:
                    return json.loads(response.read())
            except urllib.error.HTTPError as exc:
                if exc.code < 500:  # our own bad request: retrying cannot help
                    raise
                if attempt == 4:
                    raise
            except OSError:
                if attempt == 4:
                    raise
                time.sleep(1 + attempt)
        raise AssertionError("unreachable")
