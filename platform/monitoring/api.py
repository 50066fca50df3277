"""Ingestion endpoints: predictions and labels."""

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from core.api import ScopedAPIView, json_body
from monitoring import services
from registry.selectors import model_get


class SampleIn(serializers.Serializer):
    id = serializers.CharField(help_text="unique per model; a retry with the same id is a duplicate")
    timestamp = serializers.DateTimeField(required=False, help_text="ISO 8601 with offset, or epoch s")
    features = serializers.DictField()
    prediction = serializers.JSONField()
    probabilities = serializers.DictField(child=serializers.FloatField(), required=False)
    version = serializers.IntegerField(required=False)


class LabelIn(serializers.Serializer):
    id = serializers.CharField()
    label = serializers.JSONField()


class PredictionsView(ScopedAPIView):
    required_scopes = {"POST": "ingest"}

    @extend_schema(
        request=inline_serializer("PredictionsIn", {"samples": SampleIn(many=True)}),
        responses=inline_serializer(
            "PredictionsOut",
            {"accepted": serializers.IntegerField(), "duplicates": serializers.IntegerField()},
        ),
    )
    def post(self, request: Request, name: str) -> Response:
        model = model_get(name=name)
        result = services.predictions_ingest(model=model, body=json_body(request))
        return Response({"accepted": result.accepted, "duplicates": result.duplicates})


class LabelsView(ScopedAPIView):
    required_scopes = {"POST": "ingest"}

    @extend_schema(
        request=inline_serializer(
            "LabelsIn",
            {"labels": LabelIn(many=True)},
        ),
        responses=inline_serializer(
            "LabelsOut",
            {"matched": serializers.IntegerField(), "pending": serializers.IntegerField()},
        ),
    )
    def post(self, request: Request, name: str) -> Response:
        model = model_get(name=name)
        result = services.labels_ingest(model=model, body=json_body(request))
        return Response({"matched": result.matched, "pending": result.pending})
