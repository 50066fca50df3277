"""Ingestion endpoints: predictions and labels."""

from datetime import datetime

from django.core.exceptions import ValidationError
from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from core.api import ScopedAPIView, json_body
from core.errors import FieldError, InvalidInput
from monitoring import services
from monitoring.alerts import alert_to_dict
from monitoring.checks import check_to_dict, policy_for, quality_check_run, range_window, scheduled_window
from monitoring.models import Alert, QualityCheck
from registry.selectors import model_get


class SampleIn(serializers.Serializer):
    id = serializers.CharField(help_text="unique per model; a retry with the same id is a duplicate")
    timestamp = serializers.DateTimeField(required=False, help_text="ISO 8601 with offset, or epoch s")
    features = serializers.DictField()
    prediction = serializers.JSONField()
    probabilities = serializers.DictField(child=serializers.FloatField(), required=False)
    version = serializers.IntegerField(required=False)


# A dict of fields, not a class: a field named `label` would shadow Field.label.
LabelIn = inline_serializer(
    "Label", {"id": serializers.CharField(), "label": serializers.JSONField()}, many=True
)


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
            {"labels": LabelIn},
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


def _parse_time(value: str | None, field: str) -> datetime | None:
    if value in (None, ""):
        return None
    try:
        parsed = datetime.fromisoformat(str(value))
    except ValueError:
        raise InvalidInput([FieldError(None, field, f"not an ISO 8601 datetime: {value!r}")]) from None
    if parsed.tzinfo is None:
        raise InvalidInput([FieldError(None, field, "must include a timezone offset")])
    return parsed


class ChecksView(ScopedAPIView):
    """POST runs a check now over {start?, end?} (default: the policy's window ending now)."""

    required_scopes = {"GET": "read", "POST": "ingest"}

    @extend_schema(parameters=[OpenApiParameter("start", str), OpenApiParameter("end", str)])
    def get(self, request: Request, name: str) -> Response:
        model = model_get(name=name)
        start = _parse_time(request.query_params.get("start"), "start")
        end = _parse_time(request.query_params.get("end"), "end")
        checks = (
            QualityCheck.objects.filter(model=model).select_related("model", "version").order_by("window_end")
        )
        if start:
            checks = checks.filter(window_end__gte=start)
        if end:
            checks = checks.filter(window_end__lte=end)
        return Response([check_to_dict(c) for c in checks[:1000]])

    @extend_schema(
        request=inline_serializer(
            "CheckIn",
            {
                "start": serializers.DateTimeField(required=False),
                "end": serializers.DateTimeField(required=False),
            },
        )
    )
    def post(self, request: Request, name: str) -> Response:
        model = model_get(name=name)
        body = json_body(request) or {}
        if not isinstance(body, dict):
            raise InvalidInput([FieldError(None, "body", "must be a JSON object")])
        end = _parse_time(body.get("end"), "end") or timezone.now()
        start = _parse_time(body.get("start"), "start")
        if start is not None and start >= end:
            raise InvalidInput([FieldError(None, "start", "must be before end")])
        window = range_window(start, end) if start else scheduled_window(policy_for(model), end)
        check = quality_check_run(model_id=model.pk, window=window)
        assert check is not None
        check.refresh_from_db()
        return Response(check_to_dict(check), status=201)


class AlertsView(ScopedAPIView):
    required_scopes = {"GET": "read"}

    @extend_schema(parameters=[OpenApiParameter("state", str)])
    def get(self, request: Request, name: str) -> Response:
        alerts = Alert.objects.filter(model=model_get(name=name)).select_related("model")
        if request.query_params.get("state"):
            alerts = alerts.filter(state=request.query_params["state"])
        return Response([alert_to_dict(a) for a in alerts[:1000]])


POLICY_FIELDS = [
    "enabled",
    "window_kind",
    "window_size",
    "check_every_minutes",
    "min_samples",
    "min_labels",
    "metric",
    "tolerance",
    "baseline",
    "drift_share",
    "alert_k",
    "alert_n",
    "cooldown_minutes",
    "auto_retrain",
]


class PolicyView(ScopedAPIView):
    required_scopes = {"GET": "read", "PATCH": "admin"}

    def get(self, request: Request, name: str) -> Response:
        policy = policy_for(model_get(name=name))
        return Response({f: getattr(policy, f) for f in POLICY_FIELDS})

    def patch(self, request: Request, name: str) -> Response:
        policy = policy_for(model_get(name=name))
        body = json_body(request)
        if not isinstance(body, dict):
            raise InvalidInput([FieldError(None, "body", "must be a JSON object")])
        unknown = [k for k in body if k not in POLICY_FIELDS]
        if unknown:
            raise InvalidInput([FieldError(None, k, "unknown policy field") for k in unknown])
        for key, value in body.items():
            setattr(policy, key, value)
        try:
            policy.full_clean()
        except ValidationError as exc:
            raise InvalidInput(
                [FieldError(None, k, "; ".join(v)) for k, v in exc.message_dict.items()]
            ) from None
        policy.save()
        return Response({f: getattr(policy, f) for f in POLICY_FIELDS})
