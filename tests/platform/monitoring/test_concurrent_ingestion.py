"""Concurrent, overlapping batches: every request succeeds and every id is stored once.

On PostgreSQL two transactions inserting the same ids in different orders wait on each other's
unique-index entries; without a fixed insertion order that is a deadlock (a 500 for one of them).
"""

import itertools
import random
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.db import connections, transaction

from monitoring.models import GroundTruth, PredictionSample, SamplePart
from monitoring.sequential import detector_feed
from monitoring.services import labels_ingest, predictions_ingest
from registry.models import RegisteredModel
from tests.clock import FUTURE
from tests.platform.conftest import make_model, make_sample
from tests.platform.monitoring.factories import unfed

THREADS = 6
ROUNDS = 4
BATCH = 1500
IDS = 2000  # batches of 1500 out of 2000 ids: every pair of batches overlaps heavily
PAIRED = 500  # ids per request when labels race their own predictions


def _run_concurrently(work: Callable[[random.Random], None]) -> list[BaseException]:
    errors: list[BaseException] = []
    barrier = threading.Barrier(THREADS)

    def run(seed: int) -> None:
        rng = random.Random(seed)
        try:
            for _ in range(ROUNDS):
                barrier.wait()
                work(rng)
        except BaseException as exc:  # collected and asserted on in the test's thread
            errors.append(exc)
            barrier.abort()
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(seed,)) for seed in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return errors


def _shuffled_batch(rng: random.Random) -> list[int]:
    ids = rng.sample(range(IDS), BATCH)
    rng.shuffle(ids)
    return ids


@pytest.fixture
def model(transactional_db: None) -> RegisteredModel:
    return make_model()


def test_overlapping_prediction_batches_in_parallel_all_succeed_and_store_each_id_once(
    model: RegisteredModel, settings: Any, tmp_path: Path
) -> None:
    """The columnar store copies a request's index rows while none of its ids is stored, and
    inserts them ON CONFLICT DO NOTHING once one is (here: nearly every request)."""
    settings.MEDIA_ROOT = str(tmp_path)
    accepted: list[int] = []

    def work(rng: random.Random) -> None:
        body: dict[str, Any] = {"samples": [make_sample(i) for i in _shuffled_batch(rng)]}
        accepted.append(predictions_ingest(model=model, body=body).accepted)

    errors = _run_concurrently(work)
    assert errors == []
    stored = PredictionSample.objects.filter(model=model).count()
    assert stored == sum(accepted)
    assert stored == len(set(PredictionSample.objects.filter(model=model).values_list("sample_id")))
    # each part counts the index rows that point to it
    pointing = Counter(PredictionSample.objects.filter(model=model).values_list("part_id", flat=True))
    assert dict(SamplePart.objects.filter(model=model).values_list("pk", "indexed")) == pointing


def test_overlapping_label_batches_in_parallel_all_succeed_and_store_each_id_once(
    model: RegisteredModel,
) -> None:
    def work(rng: random.Random) -> None:
        body = {"labels": [{"id": f"s{i}", "label": "yes"} for i in _shuffled_batch(rng)]}
        labels_ingest(model=model, body=body)

    errors = _run_concurrently(work)
    assert errors == []
    ids = list(GroundTruth.objects.filter(model=model).values_list("sample_id", flat=True))
    assert len(ids) == len(set(ids)) and len(ids) <= IDS


def test_labels_sent_beside_their_predictions_are_each_fed_to_the_detector_once(
    model: RegisteredModel,
) -> None:
    # A label stored while its prediction's transaction is still open finds no prediction, and
    # that transaction found no label to fill: the label waits, and the next feed must fill it.
    # Each round, three threads send predictions and three send the labels of the same ids.
    taken = itertools.count()

    def work(_: random.Random) -> None:
        n = next(taken)
        ids = range(n // 2 * PAIRED, (n // 2 + 1) * PAIRED)
        if n % 2:
            labels_ingest(model=model, body={"labels": [{"id": f"s{i}", "label": "yes"} for i in ids]})
        else:
            predictions_ingest(model=model, body={"samples": [make_sample(i) for i in ids]})

    assert _run_concurrently(work) == []
    assert GroundTruth.objects.filter(model=model).count() == THREADS * ROUNDS // 2 * PAIRED
    with transaction.atomic():
        assert detector_feed(model=model, known_by=FUTURE).fed == THREADS * ROUNDS // 2 * PAIRED
    assert unfed(model) == []
