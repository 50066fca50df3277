from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from core.audit import audit_record
from core.models import ApiToken, AuditEvent, OutboxMessage


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = (
        "prefix",
        "user",
        "scope",
        "name",
        "model_names",
        "created_at",
        "expires_at",
        "last_used_at",
        "revoked",
    )
    list_filter = ("scope", "revoked")
    readonly_fields = ("prefix", "key_hash", "created_at", "last_used_at")
    search_fields = ("prefix", "name", "user__username")

    def has_add_permission(self, request: HttpRequest) -> bool:
        # The secret must be shown once at creation: use `manage.py create_api_token`.
        return False

    def save_model(self, request: HttpRequest, obj: ApiToken, form: Any, change: bool) -> None:
        super().save_model(request, obj, form, change)
        changed = {name: form.cleaned_data.get(name) for name in form.changed_data}
        audit_record(
            actor=request.user,
            action="token.revoke" if changed.get("revoked") else "token.update",
            target=obj,
            details={k: str(v) for k, v in changed.items()},
        )


@admin.register(AuditEvent)
class AuditEventAdmin(admin.ModelAdmin):
    """Read-only: the log is written by audit_record, never edited."""

    list_display = ("at", "actor_label", "action", "target_type", "target_label")
    list_filter = ("action", "target_type")
    search_fields = ("actor_label", "action", "target_label", "target_id")
    date_hierarchy = "at"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(OutboxMessage)
class OutboxMessageAdmin(admin.ModelAdmin):
    """Messages waiting for the broker to come back; re-sent every 30 s by the outbox beat task."""

    list_display = ["id", "name", "args", "created_at", "attempts", "last_error"]
    readonly_fields = ["name", "args", "options", "created_at", "attempts", "last_error"]
