import numpy as np
import pandas as pd
import pytest
from django.contrib.auth import get_user_model

from demo.services import demo_champion_artifact, demo_seed
from monitoring.models import MonitoringPolicy
from registry.models import ReferenceDataset, RegisteredModel
from workers.demo import DEMO_MODEL, TICKETS_MODEL, demo_frame, tickets_frame
from workers.drift import data_drift
from workers.features import feature_type
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


@pytest.mark.django_db
def test_demo_seed_registers_the_ticket_router_on_an_embedding_and_a_text() -> None:
    demo_seed()
    model = RegisteredModel.objects.get(name=TICKETS_MODEL)
    assert model.feature_types == {"ticket_embedding": "embedding", "ticket_text": "text"}
    assert ReferenceDataset.objects.get(model=model, is_active=True).rows == 1000
    assert MonitoringPolicy.objects.get(model=model).embedding_drift_method == "mean_perm"


def _ticket_columns(frame: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "ticket_embedding": feature_type("embedding").column(frame["ticket_embedding"]),
            "ticket_text": frame["ticket_text"],
        }
    )


def test_the_ticket_routers_drift_is_seen_by_the_embedding_and_text_tests_only() -> None:
    reference, _, reference_predicted = tickets_frame(1000, seed=3)
    types = {"ticket_embedding": "embedding", "ticket_text": "text"}
    methods = {"embedding": "mean_perm"}
    for drift, seen in ((0.0, False), (0.5, True)):
        window, labels, predicted = tickets_frame(300, drift=drift, seed=11)
        result = data_drift(
            _ticket_columns(reference), _ticket_columns(window), types, methods=methods
        ).columns
        assert result["ticket_embedding"].drifted is seen and result["ticket_text"].drifted is seen, drift
        # the router's outputs stay put: its prediction mix and its accuracy
        share = np.mean(np.array(predicted) == "technical") - np.mean(
            np.array(reference_predicted) == "technical"
        )
        assert abs(share) < 0.08
        assert np.mean(np.array(predicted) == np.array(labels)) > 0.95
