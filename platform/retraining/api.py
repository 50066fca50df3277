"""REST endpoints of retraining: request, follow, cancel, decide; the champion for serving."""

from typing import Any

from django.http import FileResponse, HttpResponseBase
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import NotFound
from rest_framework.request import Request
from rest_framework.response import Response

from core.api import ScopedAPIView
from core.serializers import AUTH, NAMED, error_responses
from registry.selectors import model_get
from registry.serializers import VersionOut
from retraining import promotion, requests, selectors
from retraining.models import Trigger

NO_JOB = {404: "no retrain job with that id"}


class RetrainJobOut(serializers.Serializer):
    id = serializers.IntegerField()
    model = serializers.CharField()
    state = serializers.CharField()
    trigger = serializers.CharField()
    requested_by = serializers.CharField(allow_null=True)
    alert = serializers.IntegerField(allow_null=True)
    champion = serializers.IntegerField(allow_null=True, help_text="the champion version when requested")
    data_start = serializers.DateTimeField(allow_null=True)
    data_end = serializers.DateTimeField(allow_null=True)
    training_samples = serializers.IntegerField(allow_null=True)
    holdout_samples = serializers.IntegerField(allow_null=True)
    plan = serializers.DictField()
    estimated_peak_bytes = serializers.IntegerField(allow_null=True)
    measured_peak_bytes = serializers.IntegerField(allow_null=True)
    wall_seconds = serializers.FloatField(allow_null=True)
    cpu_seconds = serializers.FloatField(allow_null=True)
    gpu_seconds = serializers.FloatField(allow_null=True)
    energy_joules = serializers.FloatField(allow_null=True)
    oom_events = serializers.ListField()
    progress = serializers.DictField()
    attempts = serializers.IntegerField()
    heartbeat_at = serializers.DateTimeField(allow_null=True)
    cancel_requested = serializers.BooleanField()
    result_version = serializers.IntegerField(allow_null=True)
    gate = serializers.DictField()
    decision = serializers.CharField(allow_null=True)
    decided_at = serializers.DateTimeField(allow_null=True)
    error = serializers.CharField(allow_blank=True)
    log = serializers.CharField(allow_blank=True)
    created_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)


def _job_response(job: Any, code: int = status.HTTP_200_OK) -> Response:
    return Response(RetrainJobOut(selectors.job_detail(job=job)).data, status=code)


class RetrainView(ScopedAPIView):
    required_scopes = {"POST": "admin"}

    @extend_schema(
        request=None,
        responses={202: RetrainJobOut, **error_responses(*NAMED, 409, notes={409: "a job is active"})},
    )
    def post(self, request: Request, name: str) -> Response:
        job = requests.job_request(model=model_get(name=name), trigger=Trigger.API, requested_by=request.user)
        return _job_response(job, status.HTTP_202_ACCEPTED)


class ModelJobsView(ScopedAPIView):
    required_scopes = {"GET": "read"}

    @extend_schema(responses={200: RetrainJobOut(many=True), **error_responses(*NAMED)})
    def get(self, request: Request, name: str) -> Response:
        jobs = selectors.jobs_for_model(model=model_get(name=name))
        return Response(RetrainJobOut([selectors.job_detail(job=j) for j in jobs], many=True).data)


class JobView(ScopedAPIView):
    required_scopes = {"GET": "read"}

    @extend_schema(responses={200: RetrainJobOut, **error_responses(*AUTH, 404, notes=NO_JOB)})
    def get(self, request: Request, job_id: int) -> Response:
        return _job_response(selectors.job_get(job_id=job_id))


class JobActionView(ScopedAPIView):
    """cancel, approve, reject, rollback (admin scope)."""

    required_scopes = {"POST": "admin"}
    action = ""

    @extend_schema(
        request=None,
        responses={200: RetrainJobOut, **error_responses(*AUTH, 404, 409, notes={**NO_JOB, 409: "not now"})},
    )
    def post(self, request: Request, job_id: int) -> Response:
        job = selectors.job_get(job_id=job_id)
        if self.action == "cancel":
            job = requests.job_cancel(job=job)
        elif self.action == "approve":
            job = promotion.job_approve(job=job, user=request.user)
        elif self.action == "reject":
            job = promotion.job_reject(job=job, user=request.user)
        else:
            job = promotion.job_rollback(job=job, user=request.user)
        return _job_response(selectors.job_get(job_id=job.pk))


class JobCancelView(JobActionView):
    """Cancel: a queued job stops at once, a working one at its next heartbeat; idempotent."""

    action = "cancel"

    @extend_schema(request=None, responses={200: RetrainJobOut, **error_responses(*AUTH, 404, notes=NO_JOB)})
    def post(self, request: Request, job_id: int) -> Response:
        return super().post(request, job_id)


class ChampionOut(serializers.Serializer):
    version = serializers.IntegerField()
    status = serializers.CharField()
    metrics = serializers.DictField()
    recipe = serializers.DictField(allow_null=True)
    artifact_sha256 = serializers.CharField(allow_null=True)
    made_by = serializers.CharField(help_text="uploaded, retrain job #N, ...")
    parent_version = serializers.IntegerField(allow_null=True)
    promoted_at = serializers.CharField(allow_null=True)


class ChampionView(ScopedAPIView):
    """The serving champion's version, metrics and recipe."""

    required_scopes = {"GET": "read"}

    @extend_schema(
        responses={200: ChampionOut, **error_responses(*NAMED, notes={404: "no such model, or no champion"})}
    )
    def get(self, request: Request, name: str) -> Response:
        champion = selectors.champion_get(model=model_get(name=name))
        if champion is None:
            raise NotFound(f"model {name!r} has no champion")
        summary = dict(VersionOut(champion).data)
        summary["recipe"] = champion.config.get("recipe")
        summary["parent_version"] = summary.pop("parent")
        summary["made_by"] = summary.pop("source")
        return Response(ChampionOut(summary).data)


class ChampionArtifactView(ScopedAPIView):
    """The champion's artifact file (safetensors or weights-only torch), for serving systems."""

    required_scopes = {"GET": "read"}

    @extend_schema(
        responses={
            (200, "application/octet-stream"): OpenApiResponse(
                OpenApiTypes.BINARY, description="the artifact"
            ),
            **error_responses(*NAMED, notes={404: "no such model, or no champion artifact"}),
        }
    )
    def get(self, request: Request, name: str) -> HttpResponseBase:
        champion = selectors.champion_get(model=model_get(name=name))
        if champion is None or not champion.artifact:
            raise NotFound(f"model {name!r} has no champion artifact")
        # The documented type: guessing from the name would call a .pt file a SNES page table.
        response = FileResponse(champion.artifact.open("rb"), as_attachment=True,
                                filename=str(champion.artifact.name).rsplit("/", 1)[-1],
                                content_type="application/octet-stream")  # fmt: skip
        response["X-Driftwatch-Version"] = str(champion.version)
        response["X-Driftwatch-Sha256"] = champion.artifact_sha256
        return response
