from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone

from core.admin_columns import EMPTY, clipped, model_name, short_time
from core.audit import audit_record
from monitoring.alerts import alert_acknowledge, alert_resolve
from monitoring.checks import quality_check_run
from monitoring.models import (
    Alert,
    CheckState,
    GroundTruth,
    MonitoringPolicy,
    Notification,
    PredictionSample,
    QualityCheck,
)
from monitoring.reports import check_report_request
from monitoring.window import scheduled_window
from workers.drift.result import decisions_read, metrics_read

# Write-only policy fields: never rendered back, kept when left blank, removed by a checkbox.
SECRETS = {
    "webhook_secret": "HMAC-SHA256 key",
    "pagerduty_routing_key": "PagerDuty Events v2 integration (routing) key",
}
SECRET_FIELDS = frozenset({*SECRETS, *(f"clear_{name}" for name in SECRETS)})


def _secret_input(what: str) -> forms.CharField:
    return forms.CharField(
        required=False,
        strip=False,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
        help_text=f"{what}. Never shown; leave blank to keep the current one.",
    )


class MonitoringPolicyForm(forms.ModelForm):
    """The webhook secret and the PagerDuty routing key are write-only."""

    webhook_secret = _secret_input(SECRETS["webhook_secret"])
    clear_webhook_secret = forms.BooleanField(required=False, label="Remove the webhook secret")
    pagerduty_routing_key = _secret_input(SECRETS["pagerduty_routing_key"])
    clear_pagerduty_routing_key = forms.BooleanField(required=False, label="Remove the PagerDuty routing key")

    class Meta:
        model = MonitoringPolicy
        fields = "__all__"  # noqa: DJ007  every field, as the admin would build it

    def _kept(self, name: str) -> str:
        value: str = self.cleaned_data.get(name) or ""
        if self.data.get(f"clear_{name}"):
            return ""
        return value or (getattr(self.instance, name) if self.instance.pk else "")

    def clean_webhook_secret(self) -> str:
        return self._kept("webhook_secret")

    def clean_pagerduty_routing_key(self) -> str:
        return self._kept("pagerduty_routing_key")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name in SECRETS:
            if self.instance.pk and getattr(self.instance, name):
                self.fields[name].help_text = "Set (not shown). " + str(self.fields[name].help_text)


@admin.register(MonitoringPolicy)
class MonitoringPolicyAdmin(admin.ModelAdmin):
    form = MonitoringPolicyForm

    def save_model(self, request: HttpRequest, obj: MonitoringPolicy, form: Any, change: bool) -> None:
        super().save_model(request, obj, form, change)
        changes = {
            name: "(changed)" if name in SECRET_FIELDS else str(form.cleaned_data.get(name))
            for name in form.changed_data
        }
        action = "policy.update" if change else "policy.create"
        audit_record(actor=request.user, action=action, target=obj, details={"changes": changes})

    list_display = (
        "model",
        "enabled",
        "window_kind",
        "window_size",
        "check_every_minutes",
        "metric",
        "tolerance",
        "auto_retrain",
        "next_check_at",
    )
    list_filter = ("enabled", "auto_retrain")
    actions = ["check_now"]

    @admin.action(description="Run a check now (the policy's window ending now)")
    def check_now(self, request: HttpRequest, queryset: QuerySet[MonitoringPolicy]) -> None:
        for policy in queryset:
            check = quality_check_run(
                model_id=policy.model_id, window=scheduled_window(policy, timezone.now())
            )
            if check is not None:
                audit_record(actor=request.user, action="check.run", target=check)
                self.message_user(request, f"{policy.model}: check #{check.pk} {check.state}")


@admin.register(QualityCheck)
class QualityCheckAdmin(admin.ModelAdmin):
    # Fits 1440 px beside the filter and the navigation sidebar (tests/platform/dashboard/browser).
    list_display = (model_name, "ends", "state", "samples", "accuracy", "dataset_drift")
    list_select_related = ("model",)
    list_filter = ("state", "report_state", "model")
    readonly_fields = [f.name for f in QualityCheck._meta.fields]
    actions = ["request_report"]

    @admin.display(description="window end", ordering="window_end")
    def ends(self, obj: QualityCheck) -> str:
        return short_time(obj.window_end)

    @admin.display(description="samples")
    def samples(self, obj: QualityCheck) -> str:
        return f"{obj.n_samples:,} ({obj.n_labelled:,} labelled)"

    @admin.display(description="accuracy")
    def accuracy(self, obj: QualityCheck) -> str:
        value = metrics_read(obj.metrics).value("accuracy")
        return EMPTY if value is None else f"{value:.4f}"

    @admin.display(description="drift", boolean=True)
    def dataset_drift(self, obj: QualityCheck) -> bool | None:
        return decisions_read(obj.decisions).verdict("data_drift")

    @admin.action(description="Generate (or retry) the evidently report")
    def request_report(self, request: HttpRequest, queryset: QuerySet[QualityCheck]) -> None:
        queued = 0
        for check in queryset.filter(state=CheckState.DONE):
            if check_report_request(check=check):  # False: pending or ready already
                audit_record(actor=request.user, action="report.request", target=check)
                queued += 1
        left = queryset.count() - queued
        note = f"; {left} left alone (pending, ready, or no window to report on)" if left else ""
        self.message_user(request, f"{queued} report(s) queued{note}", messages.INFO)


@admin.register(Alert)
class AlertAdmin(admin.ModelAdmin):
    list_display = (model_name, "kind", "severity", "state", "short_message", "opened")
    list_select_related = ("model",)
    list_filter = ("state", "kind", "severity", "model")
    readonly_fields = (
        "segment",
        "opened_by",
        "last_check",
        "details",
        "opened_at",
        "acknowledged_at",
        "resolved_at",
    )
    actions = ["acknowledge", "resolve"]

    @admin.display(description="message")
    def short_message(self, obj: Alert) -> str:
        return clipped(obj.message, 80)

    @admin.display(description="opened", ordering="opened_at")
    def opened(self, obj: Alert) -> str:
        return short_time(obj.opened_at)

    @admin.action(description="Acknowledge")
    def acknowledge(self, request: HttpRequest, queryset: QuerySet[Alert]) -> None:
        done = 0
        for alert in queryset:
            if alert_acknowledge(alert=alert, by=request.user.get_username()):
                audit_record(actor=request.user, action="alert.acknowledge", target=alert)
                done += 1
        self.message_user(request, f"{done} alert(s) acknowledged")

    @admin.action(description="Resolve")
    def resolve(self, request: HttpRequest, queryset: QuerySet[Alert]) -> None:
        done = 0
        for alert in queryset:
            if alert_resolve(alert=alert):
                audit_record(actor=request.user, action="alert.resolve", target=alert)
                done += 1
        self.message_user(request, f"{done} alert(s) resolved")


@admin.register(Notification)
class NotificationAdmin(admin.ModelAdmin):
    list_display = ("alert", "event", "channel", "target", "state", "attempts", "sent_at")
    list_filter = ("state", "channel")


@admin.register(PredictionSample)
class PredictionSampleAdmin(admin.ModelAdmin):
    list_display = ("model", "sample_id", "version", "timestamp", "prediction")
    list_filter = ("model",)
    search_fields = ("sample_id",)
    show_full_result_count = False  # counting millions of rows on every page is slow


@admin.register(GroundTruth)
class GroundTruthAdmin(admin.ModelAdmin):
    list_display = ("model", "sample_id", "label", "received_at")
    list_filter = ("model",)
    search_fields = ("sample_id",)
    show_full_result_count = False
