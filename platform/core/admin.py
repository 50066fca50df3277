from django.contrib import admin

from core.models import ApiToken


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ("prefix", "user", "scope", "name", "created_at", "last_used_at", "revoked")
    list_filter = ("scope", "revoked")
    readonly_fields = ("prefix", "key_hash", "created_at", "last_used_at")
    search_fields = ("prefix", "name", "user__username")

    def has_add_permission(self, request: object) -> bool:
        # The secret must be shown once at creation: use `manage.py create_api_token`.
        return False
