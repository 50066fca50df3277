"""Retraining in the admin: jobs (approve / reject / roll back / cancel), policies, "Retrain now"."""

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from core.admin_columns import EMPTY, duration, model_name, short_time, size
from core.errors import Conflict
from registry.models import RegisteredModel
from retraining import promotion, requests
from retraining.models import RetrainJob, RetrainPolicy, Trigger


@admin.register(RetrainPolicy)
class RetrainPolicyAdmin(admin.ModelAdmin):
    list_display = (
        "model",
        "promotion",
        "min_improvement",
        "alpha",
        "cooldown_minutes",
        "training_window_hours",
    )


def _each(request: HttpRequest, jobs: QuerySet[RetrainJob], action: Any, verb: str) -> None:
    for job in jobs:
        try:
            action(job=job, user=request.user)
            messages.success(request, f"job #{job.pk}: {verb}")
        except Conflict as exc:
            messages.error(request, f"job #{job.pk}: {exc.detail}")


@admin.action(description="Approve: promote the challenger")
def approve(modeladmin: Any, request: HttpRequest, queryset: QuerySet[RetrainJob]) -> None:
    _each(request, queryset, promotion.job_approve, "promoted")


@admin.action(description="Reject the challenger")
def reject(modeladmin: Any, request: HttpRequest, queryset: QuerySet[RetrainJob]) -> None:
    _each(request, queryset, promotion.job_reject, "rejected")


@admin.action(description="Roll back to the previous champion")
def rollback(modeladmin: Any, request: HttpRequest, queryset: QuerySet[RetrainJob]) -> None:
    _each(request, queryset, promotion.job_rollback, "rolled back")


@admin.action(description="Cancel")
def cancel(modeladmin: Any, request: HttpRequest, queryset: QuerySet[RetrainJob]) -> None:
    _each(request, queryset, lambda job, user: requests.job_cancel(job=job), "cancel requested")


@admin.register(RetrainJob)
class RetrainJobAdmin(admin.ModelAdmin):
    # Fits 1440 px beside the filter and the navigation sidebar (tests/platform/dashboard/browser).
    list_display = (
        "id",
        model_name,
        "state",
        "decision",
        "trigger",
        "challenger",
        "peak",
        "took",
        "created",
    )
    list_select_related = ("model", "result_version")
    list_filter = ("state", "decision", "trigger")
    actions = [approve, reject, rollback, cancel]
    readonly_fields = [f.name for f in RetrainJob._meta.fields]

    @admin.display(description="result")
    def challenger(self, obj: RetrainJob) -> str:
        return EMPTY if obj.result_version is None else f"v{obj.result_version.version}"

    @admin.display(description="peak memory")
    def peak(self, obj: RetrainJob) -> str:
        return f"estimated {size(obj.estimated_peak_bytes)}, measured {size(obj.measured_peak_bytes)}"

    @admin.display(description="took", ordering="wall_seconds")
    def took(self, obj: RetrainJob) -> str:
        return duration(obj.wall_seconds)

    @admin.display(description="created", ordering="created_at")
    def created(self, obj: RetrainJob) -> str:
        return short_time(obj.created_at)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # jobs come from "Retrain now", the API or alerts


@admin.action(description="Retrain now")
def retrain_now(modeladmin: Any, request: HttpRequest, queryset: QuerySet[RegisteredModel]) -> None:
    for model in queryset:
        try:
            job = requests.job_request(model=model, trigger=Trigger.ADMIN, requested_by=request.user)
            messages.success(request, f"{model.name}: retrain job #{job.pk} queued")
        except Conflict as exc:
            messages.error(request, f"{model.name}: {exc.detail}")


# registry is below retraining: it cannot import this action, so retraining adds it to the
# registry's model admin (registered earlier, INSTALLED_APPS order).
_model_admin = admin.site._registry.get(RegisteredModel)
if _model_admin is not None:
    _model_admin.actions = [*(_model_admin.actions or []), retrain_now]
