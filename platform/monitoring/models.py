"""Predictions and their ground truth, joined by (model, sample id) in either arrival order."""

from django.db import models

from registry.models import ModelVersion, RegisteredModel


class PredictionSample(models.Model):
    id = models.BigAutoField(primary_key=True)
    model = models.ForeignKey(RegisteredModel, on_delete=models.CASCADE, related_name="samples")
    version = models.ForeignKey(ModelVersion, null=True, blank=True, on_delete=models.SET_NULL)
    sample_id = models.CharField(max_length=200)
    timestamp = models.DateTimeField(help_text="when the prediction was made")
    received_at = models.DateTimeField()
    features = models.JSONField()
    prediction = models.JSONField()
    probabilities = models.JSONField(null=True, blank=True)

    class Meta:
        constraints = [
            # Idempotency: a client retry of the same sample id is stored once.
            models.UniqueConstraint(fields=["model", "sample_id"], name="unique_sample_per_model"),
        ]
        indexes = [models.Index(fields=["model", "timestamp"], name="sample_model_time")]

    def __str__(self) -> str:
        return f"{self.model_id}:{self.sample_id}"


class GroundTruth(models.Model):
    id = models.BigAutoField(primary_key=True)
    model = models.ForeignKey(RegisteredModel, on_delete=models.CASCADE, related_name="labels")
    sample_id = models.CharField(max_length=200)
    label = models.JSONField()
    received_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["model", "sample_id"], name="unique_label_per_model"),
        ]

    def __str__(self) -> str:
        return f"{self.model_id}:{self.sample_id}={self.label}"
