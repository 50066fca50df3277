import pytest
from django.contrib.auth import get_user_model

from demo.services import demo_champion_artifact, demo_seed
from monitoring.models import MonitoringPolicy
from registry.models import ReferenceDataset
from workers.demo import DEMO_MODEL, demo_frame
from workers.training.artifacts import Predictor


@pytest.mark.django_db
def test_demo_seed_trains_registers_and_is_idempotent() -> None:
    first = demo_seed()
    second = demo_seed()
    assert first.created_model and not second.created_model
    assert first.admin_password and second.admin_password is None
    assert get_user_model().objects.get(username="admin").is_superuser
    assert ReferenceDataset.objects.get(model__name=DEMO_MODEL, is_active=True).rows == 1000
    policy = MonitoringPolicy.objects.get(model__name=DEMO_MODEL)
    assert policy.check_every_minutes == 1 and policy.auto_retrain
    assert clf_recipe() == "tabular-classification" and first.read_token
    clf = Predictor.from_bytes(demo_champion_artifact())
    frame, labels = demo_frame(2000, seed=7)
    accuracy = sum(p == y for p, y in zip(clf.predict(frame)[0], labels, strict=True)) / len(labels)
    assert accuracy > 0.7, "the demo model learned something"


def clf_recipe() -> str:
    return Predictor.from_bytes(demo_champion_artifact()).bundle.recipe.name
