import pytest

from retraining.models import JobState, RetrainJob
from tests.platform.conftest import make_model
from tests.platform.retraining.factories import drifted_model, run

pytestmark = pytest.mark.django_db


def test_admin_retrain_request_is_accepted_with_the_job(client_for) -> None:
    make_model()
    response = client_for("admin").post("/api/v1/models/churn/retrain")
    assert response.status_code == 202
    body = response.json()
    assert body["state"] == "queued" and body["trigger"] == "api" and body["requested_by"] == "api-admin"
    assert RetrainJob.objects.filter(pk=body["id"]).exists()


def test_retrain_needs_the_admin_scope(client_for) -> None:
    make_model()
    response = client_for("read").post("/api/v1/models/churn/retrain")
    assert response.status_code == 403 and not RetrainJob.objects.exists()


def test_second_retrain_while_one_is_active_is_409(client_for) -> None:
    make_model()
    admin = client_for("admin")
    first = admin.post("/api/v1/models/churn/retrain").json()
    response = admin.post("/api/v1/models/churn/retrain")
    assert response.status_code == 409 and f"#{first['id']}" in response.json()["detail"]


def test_unknown_model_is_404(client_for) -> None:
    assert client_for("admin").post("/api/v1/models/nope/retrain").status_code == 404


def test_job_and_model_job_list_are_readable(client_for) -> None:
    make_model()
    job = client_for("admin").post("/api/v1/models/churn/retrain").json()
    reader = client_for("read")
    assert reader.get(f"/api/v1/retrain-jobs/{job['id']}").json()["id"] == job["id"]
    assert [j["id"] for j in reader.get("/api/v1/models/churn/retrain-jobs").json()] == [job["id"]]


def test_cancel_through_the_api(client_for) -> None:
    make_model()
    admin = client_for("admin")
    job = admin.post("/api/v1/models/churn/retrain").json()
    response = admin.post(f"/api/v1/retrain-jobs/{job['id']}/cancel")
    assert response.status_code == 200 and response.json()["state"] == JobState.CANCELLED


def test_approve_and_rollback_through_the_api(client_for) -> None:
    job = run(drifted_model(promotion="manual"))
    admin = client_for("admin")
    approved = admin.post(f"/api/v1/retrain-jobs/{job.pk}/approve").json()
    assert approved["decision"] == "promoted"
    rolled = admin.post(f"/api/v1/retrain-jobs/{job.pk}/rollback").json()
    assert rolled["decision"] == "rolled_back"


def test_reject_of_a_promoted_job_is_409(client_for) -> None:
    job = run(drifted_model())
    assert client_for("admin").post(f"/api/v1/retrain-jobs/{job.pk}/reject").status_code == 409


def test_champion_artifact_and_recipe_download_with_read_scope(client_for) -> None:
    from workers.training.artifacts import Predictor

    job = run(drifted_model())
    reader = client_for("read")
    champion = reader.get("/api/v1/models/concept/champion").json()
    assert champion["version"] == job.result_version.version
    assert champion["recipe"]["factory"] == "workers.training.tabular:mlp_factory"
    assert champion["made_by"] == f"retrain job #{job.pk}"
    response = reader.get("/api/v1/models/concept/champion/artifact")
    assert response.status_code == 200 and response["X-Driftwatch-Version"] == str(champion["version"])
    raw = b"".join(response.streaming_content)
    assert Predictor.from_bytes(raw).bundle.recipe.max_batch_size == champion["recipe"]["max_batch_size"]


def test_champion_download_needs_a_token(client) -> None:
    make_model()
    assert client.get("/api/v1/models/churn/champion/artifact").status_code == 401
