"""The per-model sequential detector: river's ADWIN on the error stream, label by label.

A fixed window with a tolerance decides once per check on a batch of labels; ADWIN looks at
every label as it arrives and cuts its window where the error rate changed. The detector's
state lives in the database (pickled; written and read only by this module), each label is
fed once (GroundTruth.fed_to_detector, set in the same transaction as the new state), in the
order the truths became known (the label's timestamp, else its arrival), and only labels known
by the check's window end, so a backfill replays the detector as it would have run.
"""

import logging
import pickle
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db.models import JSONField, OuterRef, Subquery
from django.db.models.functions import Coalesce

from monitoring.models import GroundTruth, PredictionSample, SequentialDetector
from registry.models import RegisteredModel

logger = logging.getLogger(__name__)

FEED_CHUNK = 5000


@dataclass
class DetectorUpdate:
    fed: int = 0  # labels fed by this call
    total: int = 0  # labels fed to the detector so far
    detections: list[dict[str, Any]] = field(default_factory=list)  # degradations found meanwhile

    @property
    def degraded(self) -> bool:
        return bool(self.detections)

    def to_dict(self) -> dict[str, Any]:
        return {
            "detector": "ADWIN",
            "fed": self.fed,
            "total_fed": self.total,
            "degraded": self.degraded,
            "evidence": self.detections[-1] if self.detections else None,
        }


def _new_detector() -> Any:
    from river.drift import ADWIN  # only on the check path

    return ADWIN()


def _error(model: RegisteredModel, prediction: Any, label: Any) -> float:
    if model.is_classification:
        return float(prediction != label)
    return abs(float(prediction) - float(label))


def _unfed(model: RegisteredModel, known_by: datetime) -> Any:
    """Labels not fed yet whose prediction is in, known by `known_by`, in the order they became known."""
    prediction = PredictionSample.objects.filter(model=model, sample_id=OuterRef("sample_id")).values(
        "prediction"
    )[:1]
    return (
        GroundTruth.objects.filter(model=model, fed_to_detector=False)
        .annotate(known_at=Coalesce("labelled_at", "received_at"))
        .filter(known_at__lte=known_by)
        .annotate(predicted=Subquery(prediction, output_field=JSONField()))
        .filter(predicted__isnull=False)
        .order_by("known_at", "id")
        .values_list("id", "sample_id", "label", "predicted")
    )


def detector_feed(*, model: RegisteredModel, known_by: datetime) -> DetectorUpdate:
    """Feed every new label to the model's detector; call inside the check's transaction."""
    row, _ = SequentialDetector.objects.get_or_create(model=model)
    row = SequentialDetector.objects.select_for_update().get(pk=row.pk)  # one feeder at a time
    detector = pickle.loads(bytes(row.state)) if row.state else _new_detector()  # noqa: S301 (our own state)
    update = DetectorUpdate(total=row.fed)
    while True:
        pairs = list(_unfed(model, known_by)[:FEED_CHUNK])
        if not pairs:
            break
        for _, sample_id, label, predicted in pairs:
            before = detector.estimation
            detector.update(_error(model, predicted, label))
            update.fed += 1
            if detector.drift_detected and detector.estimation > before:
                update.detections.append(
                    {
                        "sample_id": sample_id,
                        "label_number": row.fed + update.fed,
                        "error_before": before,
                        "error_after": detector.estimation,
                        "window": int(detector.width),
                    }
                )
        GroundTruth.objects.filter(pk__in=[p[0] for p in pairs]).update(fed_to_detector=True)
    update.total = row.fed + update.fed
    if update.fed:
        row.state = pickle.dumps(detector)
        row.fed = update.total
        row.detections += len(update.detections)
        row.last_detection = update.detections[-1] if update.detections else row.last_detection
        row.save()
        logger.info(
            "detector of model %s fed %s label(s), %s degradation(s)",
            model.pk,
            update.fed,
            len(update.detections),
        )
    return update
