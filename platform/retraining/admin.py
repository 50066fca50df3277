"""Retraining in the admin: jobs (approve / reject / roll back / cancel), policies, "Retrain now"."""

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

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
    list_display = ("id", "model", "state", "decision", "trigger", "result_version", "estimated_peak_bytes",
                    "measured_peak_bytes", "wall_seconds", "created_at")  # fmt: skip
    list_filter = ("state", "decision", "trigger")
    actions = [approve, reject, rollback, cancel]
    readonly_fields = [f.name for f in RetrainJob._meta.fields]

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
