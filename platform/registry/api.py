"""REST endpoints of the registry: models, reference datasets, versions."""

import json
from collections.abc import Callable
from typing import Any

from django.core.files.base import ContentFile
from django.db import transaction
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import exceptions, status
from rest_framework.parsers import JSONParser
from rest_framework.request import Request
from rest_framework.response import Response

from core.api import ScopedAPIView, json_body
from core.audit import audit_record, request_actor
from core.errors import FieldError, InvalidInput
from core.models import ApiToken
from core.parsers import MultiPartParser
from core.serializers import AUTH, BODY, NAMED, error_responses
from core.text import first_bad_string
from registry import selectors, services
from registry.models import ModelVersion, RegisteredModel
from registry.reference import csv_to_rows
from registry.schema import model_schema
from registry.serializers import (
    ModelIn,
    ModelOut,
    ReferenceFileIn,
    ReferenceIn,
    ReferenceOut,
    VersionIn,
    VersionOut,
)
from workers.training.artifacts import ArtifactError, ModelBundle, read_bundle
from workers.training.recipes import RecipeError, allowed_recipe_modules, recipe_from_dict
from workers.training.verify import VerifyError, verify_artifact


class ModelListView(ScopedAPIView):
    required_scopes = {"GET": "read", "POST": "ingest"}

    @extend_schema(responses={200: ModelOut(many=True), **error_responses(*AUTH)})
    def get(self, request: Request) -> Response:
        details = [selectors.model_detail(model=m) for m in RegisteredModel.objects.all()]
        return Response(ModelOut(details, many=True).data)

    @extend_schema(
        request={"application/json": ModelIn},
        responses={
            201: ModelOut,
            **error_responses(*AUTH, *BODY, 409, 415, 429, notes={409: "A model of that name exists."}),
        },
    )
    def post(self, request: Request) -> Response:
        data = json_body(request)
        with transaction.atomic():
            model = services.model_register(data=data)
            audit_record(actor=request_actor(request), action="model.register", target=model)
        return Response(ModelOut(selectors.model_detail(model=model)).data, status=status.HTTP_201_CREATED)


class ModelDetailView(ScopedAPIView):
    required_scopes = {"GET": "read"}

    @extend_schema(responses={200: ModelOut, **error_responses(*NAMED)})
    def get(self, request: Request, name: str) -> Response:
        return Response(ModelOut(selectors.model_detail(model=selectors.model_get(name=name))).data)


class ReferenceView(ScopedAPIView):
    """Baseline rows as JSON `{rows: [...]}`, a `text/csv` body, or a multipart `file` (CSV)."""

    required_scopes = {"POST": "ingest"}
    parser_classes = [JSONParser, MultiPartParser]

    @extend_schema(
        request={
            "application/json": ReferenceIn,
            "text/csv": OpenApiTypes.STR,
            "multipart/form-data": ReferenceFileIn,
        },
        responses={201: ReferenceOut, **error_responses(*NAMED, *BODY, 415, 429)},
    )
    def post(self, request: Request, name: str) -> Response:
        model = selectors.model_get(name=name)
        rows = _reference_rows(request, model)
        with transaction.atomic():
            reference = services.reference_upload(model=model, rows=rows)
            audit_record(
                actor=request_actor(request),
                action="reference.upload",
                target=model,
                details={"reference": reference.pk, "rows": reference.rows},
            )
        warnings = services.reference_warnings(model=model, reference=reference)
        body = {"id": reference.pk, "rows": reference.rows, "warnings": warnings}
        return Response(ReferenceOut(body).data, status=status.HTTP_201_CREATED)


def _reference_rows(request: Request, model: RegisteredModel) -> list[Any]:
    content_type = (request.content_type or "").split(";")[0].strip()
    if content_type == "text/csv":
        return csv_to_rows(_decode(request.read()), model_schema(model))
    if content_type == "multipart/form-data":
        upload = request.FILES.get("file")
        if upload is None:
            raise InvalidInput([FieldError(None, "file", "required: a CSV file")])
        return csv_to_rows(_decode(upload.read()), model_schema(model))
    body = json_body(request)
    if not isinstance(body, dict) or not isinstance(body.get("rows"), list) or not body["rows"]:
        raise InvalidInput([FieldError(None, "rows", "required: a non-empty list")])
    return body["rows"]


def _decode(raw: bytes) -> str:
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise InvalidInput([FieldError(None, "file", "CSV must be UTF-8")]) from None


class VersionListView(ScopedAPIView):
    """A version as multipart (artifact file + JSON fields) or as a JSON body without artifact."""

    required_scopes = {"GET": "read", "POST": "ingest"}
    parser_classes = [JSONParser, MultiPartParser]

    @extend_schema(responses={200: VersionOut(many=True), **error_responses(*NAMED)})
    def get(self, request: Request, name: str) -> Response:
        model = selectors.model_get(name=name)
        versions = ModelVersion.objects.filter(model=model).select_related("parent")
        return Response(VersionOut(versions, many=True).data)

    @extend_schema(
        request={"multipart/form-data": VersionIn, "application/json": VersionIn},
        responses={201: VersionOut, **error_responses(*NAMED, *BODY, 415, 429)},
    )
    def post(self, request: Request, name: str) -> Response:
        model = selectors.model_get(name=name)
        fields = _version_fields(request)
        _check_champion_scope(request, fields)
        _check_recipe(model, fields)
        with transaction.atomic():
            version = services.version_create(model=model, **fields)
            audit_record(
                actor=request_actor(request),
                action="version.create",
                target=model,
                details={"version": version.version, "status": version.status},
            )
        return Response(VersionOut(version).data, status=status.HTTP_201_CREATED)


def _version_fields(request: Request) -> dict[str, Any]:
    content_type = (request.content_type or "").split(";")[0].strip()
    if content_type == "multipart/form-data":
        form: Any = request.data
        data: dict[str, Any] = {k: form.get(k) for k in ("metrics", "config", "champion")}
        for key in ("metrics", "config"):
            data[key] = _json_field(key, data[key])
        artifact = request.FILES.get("artifact")
    else:
        body = json_body(request) or {}
        if not isinstance(body, dict):
            raise InvalidInput([FieldError(None, "body", "must be a JSON object")])
        data = {k: body.get(k) for k in ("metrics", "config", "champion")}
        artifact = None
    for key in ("metrics", "config"):
        if data[key] is not None and not isinstance(data[key], dict):
            raise InvalidInput([FieldError(None, key, "must be a JSON object")])
    champion = data["champion"] in (True, "true", "1", "on")
    fields: dict[str, Any] = {
        "metrics": data["metrics"],
        "config": data["config"],
        "champion": champion,
    }
    if artifact is not None:
        fields["artifact"] = ContentFile(artifact.read(), name=artifact.name)
    return fields


def _check_champion_scope(request: Request, fields: dict[str, Any]) -> None:
    """Only an admin crowns a champion: an ingest token (a serving process) uploads candidates,
    which reach serving through approve / the retraining gate. (A model's very first version still
    becomes its champion: there is none to replace.)"""
    token = request.auth
    if fields["champion"] and not (isinstance(token, ApiToken) and token.allows("admin")):
        raise exceptions.PermissionDenied(
            "champion=true needs an admin-scope token; upload without it (a candidate) and promote "
            "through the admin's approve"
        )


def _check_recipe(model: RegisteredModel, fields: dict[str, Any]) -> None:
    """A version naming a recipe (in its config or in its artifact's header) must be rebuildable:
    the recipe validates, its factory is in an allowed module, and the weights load into the
    factory's module. Only the structure is checked here; the model is built in a child process
    (``workers.training.verify``), so no factory code runs in the web process."""
    config = fields.get("config") or {}
    recipe = _config_recipe(model, config)
    artifact = fields.get("artifact")
    if artifact is None:
        if recipe is not None:
            raise InvalidInput([FieldError(None, "artifact", "a version with a recipe needs its weights")])
        return
    raw = artifact.read()
    artifact.seek(0)
    header = _header_bundle(raw)
    if recipe is None and header is None:
        return  # an opaque file: stored, never built
    if recipe is not None:
        _artifact_check(lambda: read_bundle(raw, recipe=recipe))
        config["recipe"] = recipe
    _artifact_check(lambda: verify_artifact(raw, recipe=recipe, allowed=allowed_recipe_modules()))


def _config_recipe(model: RegisteredModel, config: dict[str, Any]) -> dict[str, Any] | None:
    if "recipe" not in config:
        return None
    try:
        return recipe_from_dict(config["recipe"], task=model.task).to_dict()
    except RecipeError as exc:
        raise InvalidInput([FieldError(None, f"config.{exc.field}", exc.message)]) from None


def _header_bundle(raw: bytes) -> ModelBundle | None:
    """The artifact's own recipe, validated (allowed modules only); None for an opaque file."""
    try:
        return read_bundle(raw)
    except RecipeError as exc:
        raise InvalidInput(
            [FieldError(None, "artifact", f"the file's {exc.field} is refused: {exc.message}")]
        ) from None
    except (ArtifactError, KeyError, TypeError, ValueError, AttributeError):
        return None


def _artifact_check(check: Callable[[], object]) -> None:
    try:
        check()
    except (ArtifactError, RecipeError, VerifyError, KeyError, TypeError) as exc:
        raise InvalidInput([FieldError(None, "artifact", f"weights do not load: {exc}")]) from None


def _json_field(key: str, value: Any) -> Any:
    if value in (None, ""):
        return None
    try:
        parsed = json.loads(value)
    except (ValueError, RecursionError):
        raise InvalidInput([FieldError(None, key, "must be JSON")]) from None
    bad = first_bad_string(parsed)
    if bad is not None:
        raise InvalidInput([FieldError(None, f"{key}.{bad.field}", bad.message)])
    return parsed
