"""job_run end to end in one process: data → plan → train → gate → decision."""

import pytest
from django.core.files.base import ContentFile
from django.test import override_settings

from registry.models import ModelVersion, ReferenceDataset
from retraining.execution import job_run
from retraining.models import Decision, JobState, Promotion, RetrainJob
from retraining.requests import job_request
from tests.platform.retraining.factories import RECIPE, count_traces, drifted_model, retrainable_model, run
from tests.workers.training.headers import with_header_factory

pytestmark = pytest.mark.django_db


def test_job_trains_a_challenger_that_passes_the_gate_and_is_promoted() -> None:
    model = drifted_model()
    old = ModelVersion.objects.get(model=model, status="champion")
    job = run(model)
    assert job.state == JobState.SUCCEEDED, job.log
    assert job.decision == Decision.PROMOTED
    assert job.gate["passed"] and job.gate["challenger"] > job.gate["champion"] + 0.2
    new = ModelVersion.objects.get(model=model, status="champion")
    assert new.pk == job.result_version_id and new.parent_id == old.pk
    assert new.source == f"retrain job #{job.pk}"
    assert ModelVersion.objects.get(pk=old.pk).status == "retired"


def test_job_stores_plan_and_estimated_beside_measured_peak() -> None:
    job = run(drifted_model())
    assert job.plan["batch_size"] == RECIPE.max_batch_size and job.plan["device"] == "cpu"
    assert job.estimated_peak_bytes == job.plan["estimated_bytes"]
    assert abs(job.measured_peak_bytes - job.estimated_peak_bytes) / job.estimated_peak_bytes < 0.05
    assert job.wall_seconds > 0 and job.cpu_seconds > 0 and job.progress["epoch"] >= 1


def test_a_jobs_margin_is_the_estimators_measured_error_unless_the_operator_sets_one() -> None:
    from workers.memory.margins import UNMEASURED_MARGIN

    model = drifted_model()
    measured = run(model).plan["margin"]
    # The tabular MLP's kinds of layer are in the CPU table: well under the old constant.
    assert 0.0 < measured < UNMEASURED_MARGIN
    with override_settings(DRIFTWATCH_RETRAIN_MARGIN=0.25):
        job = job_request(model=model, trigger="api")
        job_run(job_id=job.pk)
    job.refresh_from_db()
    assert job.plan["margin"] == 0.25, job.log


def test_a_job_on_a_cpu_worker_is_sized_once(monkeypatch: pytest.MonkeyPatch) -> None:
    traces = count_traces(monkeypatch)
    job = run(drifted_model())
    assert job.state == JobState.SUCCEEDED and len(traces) == 1


def test_a_job_run_again_after_its_worker_died_keeps_its_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    model = drifted_model()
    planned = run(model).plan
    job = job_request(model=model, trigger="api")
    # What an attempt that planned and then died leaves on the row the reaper re-queues.
    RetrainJob.objects.filter(pk=job.pk).update(plan=planned, attempts=1)
    traces = count_traces(monkeypatch)
    assert job_run(job_id=job.pk) == JobState.SUCCEEDED
    job.refresh_from_db()
    assert traces == [] and job.plan == planned and "plan kept from an earlier attempt" in job.log


def test_holdout_is_the_newest_labelled_slice() -> None:
    job = run(drifted_model())
    assert job.holdout_samples == 240 and job.training_samples == 960
    assert job.data_end > job.data_start


def test_promotion_switches_the_reference_to_the_challengers_holdout() -> None:
    model = drifted_model()
    before = ReferenceDataset.objects.get(model=model, is_active=True)
    job = run(model)
    active = ReferenceDataset.objects.get(model=model, is_active=True)
    assert active.pk == job.promoted_reference_id != before.pk
    assert active.version_id == job.result_version_id and active.rows == job.holdout_samples
    assert job.previous_reference_id == before.pk


def test_manual_policy_waits_for_approval() -> None:
    model = drifted_model(promotion=Promotion.MANUAL)
    old = ModelVersion.objects.get(model=model, status="champion")
    job = run(model)
    assert job.decision == Decision.AWAITING_APPROVAL
    assert ModelVersion.objects.get(model=model, status="champion").pk == old.pk


def test_failed_gate_rejects_the_challenger_and_keeps_the_champion() -> None:
    model = drifted_model(min_improvement=0.9)
    old = ModelVersion.objects.get(model=model, status="champion")
    job = run(model)
    assert job.decision == Decision.GATE_FAILED and not job.gate["passed"]
    assert ModelVersion.objects.get(pk=job.result_version_id).status == "rejected"
    assert ModelVersion.objects.get(model=model, status="champion").pk == old.pk


@override_settings(DRIFTWATCH_RECIPE_MODULES=["tests.platform.retraining.test_execution"])
def test_a_raising_recipe_fails_the_job_with_its_traceback_and_leaves_the_champion() -> None:
    model = drifted_model()
    old = ModelVersion.objects.get(model=model, status="champion")
    ModelVersion.objects.filter(pk=old.pk).update(
        config={
            "recipe": {**RECIPE.to_dict(), "factory": "tests.platform.retraining.test_execution:raising"}
        },
        artifact="",
    )
    job = run(model)
    assert job.state == JobState.FAILED
    assert "Traceback" in job.log and "ZeroDivisionError" in job.log
    assert ModelVersion.objects.get(model=model, status="champion").pk == old.pk


def raising(schema: dict, hyperparameters: dict) -> object:
    return 1 / 0


def test_too_few_labelled_samples_fail_the_job_without_training() -> None:
    model = retrainable_model()
    job = run(model)
    assert job.state == JobState.FAILED and "usable labelled samples" in job.error
    assert job.plan == {}


def test_an_oom_is_recorded_with_its_plan_and_retried_with_a_smaller_batch() -> None:
    model = drifted_model()
    with override_settings(DRIFTWATCH_RETRAIN_MEMORY_CAP_BYTES=60_000):
        job = run(model)
    assert job.state == JobState.SUCCEEDED, job.log
    assert len(job.oom_events) == 1
    failed = job.oom_events[0]
    assert failed["plan"]["batch_size"] == RECIPE.max_batch_size and failed["measured_bytes"] > 60_000
    assert job.plan["batch_size"] < failed["plan"]["batch_size"]
    assert job.measured_peak_bytes <= 60_000


def test_an_oom_after_the_retry_fails_the_job() -> None:
    model = drifted_model()
    with override_settings(DRIFTWATCH_RETRAIN_MEMORY_CAP_BYTES=20_000):
        job = run(model)
    assert job.state == JobState.FAILED and len(job.oom_events) == 2


def test_a_rerun_of_a_claimed_job_does_nothing() -> None:
    job = run(drifted_model())
    log = job.log
    assert job_run(job_id=job.pk) == JobState.SUCCEEDED
    job.refresh_from_db()
    assert job.log == log


def test_a_champion_whose_header_names_a_refused_factory_fails_the_job_with_the_reason() -> None:
    model = drifted_model()
    old = ModelVersion.objects.get(model=model, status="champion")
    with old.artifact.open("rb") as handle:
        raw = with_header_factory(handle.read(), "os:system")
    old.artifact.save("model.safetensors", ContentFile(raw), save=False)
    ModelVersion.objects.filter(pk=old.pk).update(config={}, artifact=old.artifact.name)
    job = run(model)
    assert job.state == JobState.FAILED
    assert "RecipeNotAllowed" in job.error and "'os' is not allowed" in job.error
    assert ModelVersion.objects.get(model=model, status="champion").pk == old.pk
