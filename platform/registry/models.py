"""Registered models, their versions (champion/challenger lineage) and reference datasets."""

import re

from django.core.validators import RegexValidator
from django.db import models
from django.db.models import Q

from workers.features import feature_type_names

MODEL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
model_name_validator = RegexValidator(
    MODEL_NAME,
    "letters, digits, '_', '.', '-' (at most 100, starting with a letter or digit)",
)


class Task(models.TextChoices):
    CLASSIFICATION = "classification"
    REGRESSION = "regression"


def feature_type_choices() -> list[tuple[str, str]]:
    """The feature types registered in ``workers.features`` (not a DB field's choices: a model's
    ``features`` is JSON validated against the registry, so a new type needs no migration)."""
    return [(name, name) for name in feature_type_names()]


class RegisteredModel(models.Model):
    name = models.CharField(max_length=100, unique=True, validators=[model_name_validator])
    task = models.CharField(max_length=20, choices=Task.choices)
    features = models.JSONField(help_text='[{"name": ..., "type": "numerical"|"categorical"}]')
    classes = models.JSONField(default=list, blank=True, help_text="class labels (classification)")
    description = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def feature_types(self) -> dict[str, str]:
        return {f["name"]: f["type"] for f in self.features}

    @property
    def is_classification(self) -> bool:
        return self.task == Task.CLASSIFICATION


class VersionStatus(models.TextChoices):
    CANDIDATE = "candidate"
    CHAMPION = "champion"
    RETIRED = "retired"
    REJECTED = "rejected"


# Suffixes an artifact keeps from its client-given name; any other name gets ".bin" appended, so no
# stored file ends in a suffix Python imports (.py, .pyc, .so, ...).
ARTIFACT_SUFFIXES = (".safetensors", ".pt", ".pth", ".bin", ".ckpt", ".onnx", ".pkl", ".joblib", ".npz")


def artifact_path(instance: "ModelVersion", filename: str) -> str:
    name = filename.rsplit("/", 1)[-1]
    if not name.lower().endswith(ARTIFACT_SUFFIXES):
        name += ".bin"
    return f"artifacts/{instance.model.name}/v{instance.version}/{name}"


class ModelVersion(models.Model):
    model = models.ForeignKey(RegisteredModel, on_delete=models.CASCADE, related_name="versions")
    version = models.PositiveIntegerField()
    status = models.CharField(max_length=10, choices=VersionStatus.choices, default=VersionStatus.CANDIDATE)
    artifact = models.FileField(upload_to=artifact_path, blank=True)
    artifact_sha256 = models.CharField(max_length=64, blank=True)
    metrics = models.JSONField(default=dict, blank=True)
    config = models.JSONField(default=dict, blank=True, help_text="how to build and train this version")
    # Lineage: where this version came from.
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="children"
    )
    training_data_start = models.DateTimeField(null=True, blank=True)
    training_data_end = models.DateTimeField(null=True, blank=True)
    training_samples = models.PositiveIntegerField(null=True, blank=True)
    source = models.CharField(max_length=200, blank=True, help_text="uploaded, retrain job #N, ...")
    created_at = models.DateTimeField(auto_now_add=True)
    promoted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["model", "-version"]
        constraints = [
            models.UniqueConstraint(fields=["model", "version"], name="unique_version_per_model"),
            # The champion alias points at one version per model at most.
            models.UniqueConstraint(
                fields=["model"], condition=Q(status="champion"), name="one_champion_per_model"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.model.name} v{self.version} ({self.status})"


def reference_path(instance: "ReferenceDataset", filename: str) -> str:
    return f"references/{instance.model.name}/{filename}"


class ReferenceDataset(models.Model):
    """Baseline rows (features, label, optional prediction/probabilities) stored as Parquet."""

    model = models.ForeignKey(RegisteredModel, on_delete=models.CASCADE, related_name="references")
    version = models.ForeignKey(
        ModelVersion, null=True, blank=True, on_delete=models.SET_NULL, related_name="references"
    )
    file = models.FileField(upload_to=reference_path)
    rows = models.PositiveIntegerField()
    columns = models.JSONField(default=list)
    is_active = models.BooleanField(default=True)
    source = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # Computed once per reference so a scheduled check costs O(current window).
    summary = models.FileField(upload_to=reference_path, blank=True)
    calibrator = models.JSONField(null=True, blank=True, help_text="confidence calibration (CBPE)")
    baseline_metrics = models.JSONField(null=True, blank=True, help_text="the model's metrics on this set")

    class Meta:
        ordering = ["model", "-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["model"], condition=Q(is_active=True), name="one_active_reference_per_model"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.model.name} reference #{self.pk} ({self.rows} rows)"
