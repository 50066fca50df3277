"""Writes for the registry: models, versions (with the champion alias), reference datasets."""

import hashlib
import uuid
from typing import Any

import numpy as np
import pandas as pd
from django.core.files.base import ContentFile
from django.core.files.uploadedfile import UploadedFile
from django.db import IntegrityError, transaction
from django.db.models import Max
from django.utils import timezone

from core.errors import Conflict, FieldError, InvalidInput
from registry.models import (
    MODEL_NAME,
    ModelVersion,
    ReferenceDataset,
    RegisteredModel,
    Task,
    VersionStatus,
    model_name_validator,
)
from registry.reference import (
    LABEL,
    PREDICTION,
    PROBA_PREFIX,
    WINDOW_COLUMNS,
    clean_reference_rows,
    frame_to_parquet,
)
from registry.schema import model_schema
from workers.drift.estimation import calibration_problem
from workers.features import feature_type, feature_type_names

# Names and labels are identifiers shown in tables; descriptions are a paragraph, not a file.
MAX_NAME_CHARS = 200
MAX_DESCRIPTION_CHARS = 10_000
RESERVED = ", ".join([*WINDOW_COLUMNS, "names starting with '__'"])
# A check's window query selects one column per feature and per class (plus six): PostgreSQL
# allows 1,664 result columns and SQLite 2,000, so these keep every registered model checkable.
MAX_FEATURES = 1000
MAX_CLASSES = 500


def _schema_errors(data: dict[str, Any]) -> list[FieldError]:
    errors: list[FieldError] = []
    name = data.get("name")
    # fullmatch: `$` in the pattern would also accept a trailing newline ("probe\n").
    if not isinstance(name, str) or not MODEL_NAME.fullmatch(name):
        errors.append(FieldError(None, "name", str(model_name_validator.message)))
    if data.get("task") not in Task.values:
        errors.append(FieldError(None, "task", f"must be one of {Task.values}"))
    features = data.get("features")
    if not isinstance(features, list) or not features:
        errors.append(FieldError(None, "features", "required: a non-empty list of {name, type}"))
        features = []
    elif len(features) > MAX_FEATURES:
        errors.append(FieldError(None, "features", f"at most {MAX_FEATURES} features (got {len(features)})"))
        features = []
    seen: set[str] = set()
    for i, feature in enumerate(features):
        if not isinstance(feature, dict) or not isinstance(feature.get("name"), str) or not feature["name"]:
            errors.append(FieldError(i, "features.name", "required: a non-empty string"))
            continue
        if len(feature["name"]) > MAX_NAME_CHARS:
            errors.append(FieldError(i, "features.name", f"at most {MAX_NAME_CHARS} characters"))
            continue
        if feature["name"] in seen:
            errors.append(FieldError(i, "features.name", f"duplicate name {feature['name']!r}"))
        if feature["name"].startswith("__") or feature["name"] in WINDOW_COLUMNS:
            errors.append(
                FieldError(i, "features.name", f"reserved name {feature['name']!r} (reserved: {RESERVED})")
            )
        seen.add(feature["name"])
        if feature.get("type") not in (types := feature_type_names()):
            errors.append(FieldError(i, "features.type", f"must be one of {types}"))
        else:
            errors += _option_errors(i, feature)
    classes = data.get("classes") or []
    if isinstance(classes, list) and len(classes) > MAX_CLASSES:
        errors.append(FieldError(None, "classes", f"at most {MAX_CLASSES} classes (got {len(classes)})"))
    elif data.get("task") == Task.CLASSIFICATION:
        if (
            not isinstance(classes, list)
            or len(classes) < 2
            or len({str(c) for c in classes}) != len(classes)
        ):
            errors.append(FieldError(None, "classes", "classification needs at least two distinct classes"))
        elif not all(isinstance(c, str | int) and not isinstance(c, bool) for c in classes):
            errors.append(FieldError(None, "classes", "class labels must be strings or integers"))
        elif any(len(str(c)) > MAX_NAME_CHARS for c in classes):
            errors.append(
                FieldError(None, "classes", f"class labels have at most {MAX_NAME_CHARS} characters")
            )
    elif classes:
        errors.append(FieldError(None, "classes", "only classification models have classes"))
    description = data.get("description")
    if description is not None and (
        not isinstance(description, str) or len(description) > MAX_DESCRIPTION_CHARS
    ):
        errors.append(
            FieldError(None, "description", f"a string of at most {MAX_DESCRIPTION_CHARS} characters")
        )
    return errors


def _option_errors(i: int, feature: dict[str, Any]) -> list[FieldError]:
    """A type's own options (an embedding's dim) are checked by the type; a key no type of this
    feature takes is refused rather than dropped."""
    kind = feature_type(feature["type"])
    errors = [
        FieldError(i, f"features.{key}", f"unknown field for a {kind.name} feature")
        for key in sorted(feature.keys() - {"name", "type", *kind.options})
    ]
    return errors + [FieldError(i, f"features.{k}", m) for k, m in kind.option_errors(feature).items()]


def _feature_spec(feature: dict[str, Any]) -> dict[str, Any]:
    options = feature_type(feature["type"]).options
    return {"name": feature["name"], "type": feature["type"]} | {
        k: feature[k] for k in options if k in feature
    }


def model_register(*, data: Any) -> RegisteredModel:
    if not isinstance(data, dict):
        raise InvalidInput([FieldError(None, "body", "must be a JSON object")])
    errors = _schema_errors(data)
    if errors:
        raise InvalidInput(errors)
    features = [_feature_spec(f) for f in data["features"]]
    try:
        with transaction.atomic():
            return RegisteredModel.objects.create(
                name=data["name"],
                task=data["task"],
                features=features,
                classes=list(data.get("classes") or []),
                description=str(data.get("description") or ""),
            )
    except IntegrityError:
        raise Conflict(f"a model named {data['name']!r} already exists") from None


def reference_upload(*, model: RegisteredModel, rows: list[Any], source: str = "api") -> ReferenceDataset:
    """Validate rows, store them as Parquet and make them the model's active reference."""
    frame = clean_reference_rows(rows, model_schema(model))
    champion = ModelVersion.objects.filter(model=model, status=VersionStatus.CHAMPION).first()
    with transaction.atomic():
        ReferenceDataset.objects.filter(model=model, is_active=True).update(is_active=False)
        reference = ReferenceDataset(
            model=model,
            version=champion,
            rows=len(frame),
            columns=list(frame.columns),
            source=source,
        )
        reference.file.save(f"{uuid.uuid4().hex}.parquet", ContentFile(frame_to_parquet(frame)), save=False)
        reference.save()
    return reference


def reference_warnings(*, model: RegisteredModel, reference: ReferenceDataset) -> list[str]:
    """What the uploader should know: a reference that cannot support the label-free estimate."""
    if not model.is_classification:
        return []
    with reference.file.open("rb") as handle:
        frame = pd.read_parquet(handle)
    columns = [PROBA_PREFIX + str(c) for c in model.classes]
    if PREDICTION not in frame.columns or not set(columns) <= set(frame.columns):
        return []
    proba = frame[columns].to_numpy(dtype="float64")
    if np.isnan(proba).any() or frame[LABEL].isna().any():
        return []
    problem = calibration_problem(proba, frame[LABEL], model.classes, frame[PREDICTION])
    return [f"label-free accuracy estimate unavailable: {problem}"] if problem else []


def version_create(
    *,
    model: RegisteredModel,
    artifact: UploadedFile | ContentFile | None = None,
    metrics: dict[str, Any] | None = None,
    config: dict[str, Any] | None = None,
    champion: bool = False,
    parent: ModelVersion | None = None,
    source: str = "uploaded",
    **lineage: Any,
) -> ModelVersion:
    """A new version; it becomes champion if asked to, or if the model has none yet."""
    with transaction.atomic():
        # Lock the model row so concurrent uploads get distinct version numbers.
        RegisteredModel.objects.select_for_update().get(pk=model.pk)
        number = (ModelVersion.objects.filter(model=model).aggregate(m=Max("version"))["m"] or 0) + 1
        version = ModelVersion(
            model=model,
            version=number,
            metrics=metrics or {},
            config=config or {},
            parent=parent,
            source=source,
            **lineage,
        )
        if artifact is not None:
            version.artifact_sha256 = _sha256(artifact)
            version.artifact.save(getattr(artifact, "name", None) or "model.bin", artifact, save=False)
        version.save()
        has_champion = ModelVersion.objects.filter(model=model, status=VersionStatus.CHAMPION).exists()
        if champion or not has_champion:
            version_promote(version=version)
    return version


def _sha256(artifact: UploadedFile | ContentFile) -> str:
    digest = hashlib.sha256()
    for chunk in artifact.chunks():
        digest.update(chunk)
    artifact.seek(0)
    return digest.hexdigest()


def version_promote(*, version: ModelVersion) -> ModelVersion:
    """Move the champion alias to this version; the previous champion is retired."""
    with transaction.atomic():
        ModelVersion.objects.filter(model_id=version.model_id, status=VersionStatus.CHAMPION).exclude(
            pk=version.pk
        ).update(status=VersionStatus.RETIRED)
        version.status = VersionStatus.CHAMPION
        version.promoted_at = timezone.now()
        version.save(update_fields=["status", "promoted_at"])
    return version
