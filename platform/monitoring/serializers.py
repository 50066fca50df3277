"""What the monitoring endpoints take and return: one definition each, rendered and documented.

The webhook payload's alert is AlertOut too.
"""

from typing import Any

from rest_framework import serializers

from core.serializers import IsoDateTimeField, typed_json
from monitoring.alert_kinds import ALERT_KINDS, alert_kind
from monitoring.models import Alert, MonitoringPolicy, QualityCheck
from monitoring.policy import API_POLICY_FIELDS
from workers.drift.decisions import Decisions
from workers.drift.engine import ColumnDriftDict, DriftDict
from workers.drift.quality import LabelStats, Metrics
from workers.drift.result import decisions_read


class SampleIn(serializers.Serializer):
    id = serializers.CharField(help_text="unique per model; a retry with the same id is a duplicate")
    timestamp = serializers.DateTimeField(required=False, help_text="ISO 8601 with offset, or epoch s")
    features = serializers.DictField()
    prediction = serializers.JSONField()
    probabilities = serializers.DictField(child=serializers.FloatField(), required=False)
    version = serializers.IntegerField(required=False)


class PredictionsIn(serializers.Serializer):
    samples = SampleIn(many=True)


class PredictionsOut(serializers.Serializer):
    accepted = serializers.IntegerField()
    duplicates = serializers.IntegerField(help_text="ids already stored: a retried batch")


class LabelIn(serializers.Serializer):
    id = serializers.CharField()
    label = serializers.JSONField()  # type: ignore[assignment]  # a declared field, popped by DRF
    timestamp = serializers.DateTimeField(required=False, help_text="when the truth became known")


class LabelsIn(serializers.Serializer):
    labels = LabelIn(many=True)


class LabelsOut(serializers.Serializer):
    matched = serializers.IntegerField(help_text="labels joined to a logged prediction")
    pending = serializers.IntegerField(help_text="labels waiting for their prediction")


class CheckIn(serializers.Serializer):
    start = serializers.DateTimeField(required=False)
    end = serializers.DateTimeField(required=False)


class WindowOut(serializers.Serializer):
    spec = serializers.CharField(source="window_spec", help_text='"24h", "1000samples" or "range:<start>"')
    start = IsoDateTimeField(source="window_start")
    end = IsoDateTimeField(source="window_end")


class CheckOut(serializers.ModelSerializer):
    model = serializers.CharField(source="model.name")
    version = serializers.IntegerField(source="version.version", allow_null=True)
    window = WindowOut(source="*")
    metrics = typed_json(Metrics, "realised metrics on the labelled samples ({} below min_labels)")
    estimated = serializers.DictField(help_text="the label-free accuracy estimate (CBPE)")
    per_version = serializers.DictField(help_text="realised metrics per model version")
    labels = typed_json(LabelStats, "label coverage and delay")
    drift = typed_json(DriftDict, "data drift per feature")
    prediction_drift = typed_json(ColumnDriftDict, "drift of the predictions")
    data_quality = serializers.DictField(help_text="missing values, out-of-schema categories")
    decisions = typed_json(Decisions, "each alert kind: true breach, false fine, null undecided")
    segments = serializers.DictField(
        help_text="per segment feature: its bins and, per value (top by volume, then 'other'), the "
        "same measures and decisions; decisions.undecided says why a small segment decided nothing"
    )
    error = serializers.SerializerMethodField()
    skipped_reason = serializers.SerializerMethodField()
    started_at = IsoDateTimeField()
    finished_at = IsoDateTimeField(allow_null=True)
    computed_at = IsoDateTimeField(source="finished_at", allow_null=True, help_text="when it was computed")
    labels_refreshed_at = IsoDateTimeField(
        allow_null=True, help_text="when the realised side last caught up with late labels"
    )

    class Meta:
        model = QualityCheck
        fields = [
            "id",
            "model",
            "version",
            "window",
            "state",
            "n_samples",
            "n_labelled",
            "metrics",
            "estimated",
            "per_version",
            "labels",
            "drift",
            "prediction_drift",
            "data_quality",
            "decisions",
            "segments",
            "error",
            "skipped_reason",
            "started_at",
            "finished_at",
            "computed_at",
            "labels_refreshed_at",
        ]

    def get_error(self, check: QualityCheck) -> str | None:
        return check.error or None

    def get_skipped_reason(self, check: QualityCheck) -> str | None:
        """State "skipped": why the window had nothing to measure ("no predictions between …")."""
        return check.skipped_reason or None


class AlertOut(serializers.ModelSerializer):
    model = serializers.CharField(source="model.name")
    check = serializers.IntegerField(source="opened_by_id", allow_null=True, help_text="= opened_by_check")
    opened_by_check = serializers.IntegerField(source="opened_by_id", allow_null=True)
    resolved_by_check = serializers.IntegerField(source="resolved_by_check_id", allow_null=True)
    opened_at = IsoDateTimeField()
    acknowledged_at = IsoDateTimeField(allow_null=True)
    resolved_at = IsoDateTimeField(allow_null=True)
    rule = serializers.SerializerMethodField(
        help_text="the threshold rule that produced a quality alert, in words (null for drift kinds)"
    )

    class Meta:
        model = Alert
        fields = [
            "id",
            "model",
            "kind",
            "segment",
            "severity",
            "state",
            "message",
            "rule",
            "check",
            "opened_by_check",
            "resolved_by_check",
            "opened_at",
            "acknowledged_at",
            "resolved_at",
        ]

    def get_rule(self, alert: Alert) -> str | None:
        if alert.kind not in ALERT_KINDS or not alert_kind(alert.kind).thresholded:
            return None
        return decisions_read((alert.details or {}).get("decisions")).rule_text


class CheckRunOut(CheckOut):
    """POST /checks: the check, and the alerts it opened and resolved."""

    alerts_opened = AlertOut(source="opened_alerts", many=True)
    alerts_resolved = AlertOut(source="resolved_alerts", many=True)

    class Meta(CheckOut.Meta):
        fields = [*CheckOut.Meta.fields, "alerts_opened", "alerts_resolved"]


class PolicyOut(serializers.ModelSerializer):
    class Meta:
        model = MonitoringPolicy
        fields = API_POLICY_FIELDS


class PolicyPatchIn(serializers.ModelSerializer):
    """Documents PATCH: any subset of the fields; monitoring.policy.policy_update validates."""

    class Meta:
        model = MonitoringPolicy
        fields = API_POLICY_FIELDS
        extra_kwargs: dict[str, Any] = {name: {"required": False} for name in API_POLICY_FIELDS}
