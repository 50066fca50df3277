"""What the registry's endpoints take and return: one definition each, rendered and documented."""

from typing import Any

from rest_framework import serializers

from core.serializers import IsoDateTimeField
from registry.models import ModelVersion, Task, feature_type_choices
from workers.features.base import MISSING_CHOICES


class FeatureTypeField(serializers.ChoiceField):
    """The registered feature types, read when the serializer is built (a type registered
    after start-up is listed too: DRF rebuilds a field from its arguments per serializer)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(feature_type_choices(), **kwargs)


class FeatureSerializer(serializers.Serializer):
    name = serializers.CharField()
    type = FeatureTypeField()
    # A type's own options (FeatureKind.options), present only where the feature has them.
    dim = serializers.IntegerField(required=False, help_text="embedding only: the vector's length")
    missing = serializers.ChoiceField(
        MISSING_CHOICES,
        required=False,
        help_text="embedding and text only: refuse (the default) or allow a null or absent value",
    )


class ModelIn(serializers.Serializer):
    """Documents the body; registry.services.model_register validates it (400 naming the field)."""

    name = serializers.CharField()
    task = serializers.ChoiceField(Task.values)
    features = FeatureSerializer(many=True)
    classes = serializers.ListField(
        child=serializers.JSONField(), required=False, help_text="classification only: strings or integers"
    )
    description = serializers.CharField(required=False)


class ReferenceBriefOut(serializers.Serializer):
    id = serializers.IntegerField()
    rows = serializers.IntegerField()


class ModelOut(serializers.Serializer):
    """Renders registry.selectors.ModelDetail."""

    name = serializers.CharField()
    task = serializers.ChoiceField(Task.values)
    features = FeatureSerializer(many=True)
    classes = serializers.ListField(child=serializers.JSONField())
    description = serializers.CharField(allow_blank=True)
    created_at = IsoDateTimeField()
    champion = serializers.IntegerField(allow_null=True, help_text="the champion's version number")
    versions = serializers.IntegerField(help_text="how many versions are registered")
    reference = ReferenceBriefOut(allow_null=True, help_text="the active reference dataset")
    samples = serializers.IntegerField(help_text="predictions logged")
    labels = serializers.IntegerField(help_text="labels received")


class ReferenceIn(serializers.Serializer):
    rows = serializers.ListField(
        child=serializers.DictField(), help_text="{features, label, prediction?, probabilities?}"
    )


class ReferenceFileIn(serializers.Serializer):
    file = serializers.FileField(help_text="CSV: feature columns, label, prediction?, proba_<class>?")


class ReferenceOut(serializers.Serializer):
    id = serializers.IntegerField()
    rows = serializers.IntegerField()
    warnings = serializers.ListField(child=serializers.CharField())


class VersionIn(serializers.Serializer):
    artifact = serializers.FileField(required=False, help_text="multipart only")
    metrics = serializers.JSONField(required=False)
    config = serializers.JSONField(required=False, help_text="how to build and train it")
    champion = serializers.BooleanField(required=False)


class VersionOut(serializers.ModelSerializer):
    metrics = serializers.DictField(allow_null=True)
    config = serializers.DictField(allow_null=True)
    artifact = serializers.SerializerMethodField()
    artifact_sha256 = serializers.SerializerMethodField()
    parent = serializers.SerializerMethodField()  # type: ignore[assignment]  # popped by DRF
    created_at = IsoDateTimeField()
    promoted_at = IsoDateTimeField(allow_null=True)

    class Meta:
        model = ModelVersion
        fields = [
            "version",
            "status",
            "metrics",
            "config",
            "artifact",
            "artifact_sha256",
            "parent",
            "source",
            "created_at",
            "promoted_at",
        ]

    def get_artifact(self, version: ModelVersion) -> str | None:
        return version.artifact.name or None

    def get_artifact_sha256(self, version: ModelVersion) -> str | None:
        return version.artifact_sha256 or None

    def get_parent(self, version: ModelVersion) -> int | None:
        return version.parent.version if version.parent_id and version.parent else None
