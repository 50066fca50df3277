"""Reads for the registry."""

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import QuerySet
from django.http import Http404

from registry.models import ModelVersion, ReferenceDataset, RegisteredModel, VersionStatus


def model_get(*, name: str) -> RegisteredModel:
    model = RegisteredModel.objects.filter(name=name).first()
    if model is None:
        raise Http404(f"no model named {name!r}")
    return model


def champion_get(*, model: RegisteredModel) -> ModelVersion | None:
    return ModelVersion.objects.filter(model=model, status=VersionStatus.CHAMPION).first()


def versions_list(*, model: RegisteredModel) -> QuerySet[ModelVersion]:
    """The model's versions, newest first, with the version each was trained from."""
    return ModelVersion.objects.filter(model=model).select_related("parent").order_by("-version")


def active_reference_get(*, model: RegisteredModel) -> ReferenceDataset | None:
    return ReferenceDataset.objects.filter(model=model, is_active=True).first()


@dataclass(frozen=True)
class ReferenceBrief:
    id: int
    rows: int


@dataclass(frozen=True)
class ModelDetail:
    """A model with its counts, as registry.serializers.ModelOut renders it."""

    name: str
    task: str
    features: list[dict[str, Any]]  # name, type and the type's options (dim, missing)
    classes: list[Any]
    description: str
    created_at: datetime
    champion: int | None
    versions: int
    reference: ReferenceBrief | None
    samples: int
    labels: int


def model_detail(*, model: RegisteredModel) -> ModelDetail:
    champion = champion_get(model=model)
    reference = active_reference_get(model=model)
    return ModelDetail(
        name=model.name,
        task=model.task,
        features=model.features,
        classes=model.classes,
        description=model.description,
        created_at=model.created_at,
        champion=champion.version if champion else None,
        versions=ModelVersion.objects.filter(model=model).count(),
        reference=ReferenceBrief(id=reference.pk, rows=reference.rows) if reference else None,
        # Counted through the reverse relations monitoring declares: registry never imports it.
        samples=model.samples.count(),
        labels=model.labels.count(),
    )
