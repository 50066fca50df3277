"""Reads for the registry."""

from typing import Any

from django.http import Http404

from registry.models import ModelVersion, ReferenceDataset, RegisteredModel, VersionStatus


def model_get(*, name: str) -> RegisteredModel:
    model = RegisteredModel.objects.filter(name=name).first()
    if model is None:
        raise Http404(f"no model named {name!r}")
    return model


def champion_get(*, model: RegisteredModel) -> ModelVersion | None:
    return ModelVersion.objects.filter(model=model, status=VersionStatus.CHAMPION).first()


def active_reference_get(*, model: RegisteredModel) -> ReferenceDataset | None:
    return ReferenceDataset.objects.filter(model=model, is_active=True).first()


def model_detail(*, model: RegisteredModel) -> dict[str, Any]:
    champion = champion_get(model=model)
    reference = active_reference_get(model=model)
    return {
        "name": model.name,
        "task": model.task,
        "features": model.features,
        "classes": model.classes,
        "description": model.description,
        "created_at": model.created_at.isoformat(),
        "champion": champion.version if champion else None,
        "versions": ModelVersion.objects.filter(model=model).count(),
        "reference": {"id": reference.pk, "rows": reference.rows} if reference else None,
        # Counted through the reverse relations monitoring declares: registry never imports it.
        "samples": model.samples.count(),
        "labels": model.labels.count(),
    }
