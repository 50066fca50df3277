from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from core.admin_columns import clipped, model_name, short_time
from registry.models import ModelVersion, ReferenceDataset, RegisteredModel
from registry.services import version_promote


class VersionInline(admin.TabularInline):
    model = ModelVersion
    extra = 0
    fields = ("version", "status", "source", "metrics", "created_at", "promoted_at")
    readonly_fields = fields
    show_change_link = True
    can_delete = False


@admin.register(RegisteredModel)
class RegisteredModelAdmin(admin.ModelAdmin):
    list_display = ("name", "task", "feature_count", "created_at")
    search_fields = ("name", "description")
    list_filter = ("task",)
    inlines = [VersionInline]

    @admin.display(description="features")
    def feature_count(self, obj: RegisteredModel) -> int:
        return len(obj.features)


@admin.register(ModelVersion)
class ModelVersionAdmin(admin.ModelAdmin):
    # Fits 1440 px beside the filter and the navigation sidebar (tests/platform/dashboard/browser).
    list_display = (model_name, "version", "status", "short_source", "created", "promoted")
    list_select_related = ("model",)
    list_filter = ("status", "model")
    readonly_fields = ("artifact_sha256", "created_at", "promoted_at")
    actions = ["promote"]

    @admin.display(description="source")
    def short_source(self, obj: ModelVersion) -> str:
        return clipped(obj.source, 40)

    @admin.display(description="created", ordering="created_at")
    def created(self, obj: ModelVersion) -> str:
        return short_time(obj.created_at)

    @admin.display(description="promoted", ordering="promoted_at")
    def promoted(self, obj: ModelVersion) -> str:
        return short_time(obj.promoted_at)

    @admin.action(description="Promote to champion (retires the current champion)")
    def promote(self, request: HttpRequest, queryset: QuerySet[ModelVersion]) -> None:
        if queryset.count() != 1:
            self.message_user(request, "select exactly one version to promote", messages.ERROR)
            return
        version = version_promote(version=queryset.get())
        self.message_user(request, f"{version} is now the champion")


@admin.register(ReferenceDataset)
class ReferenceDatasetAdmin(admin.ModelAdmin):
    list_display = ("model", "rows", "is_active", "version", "source", "created_at")
    list_filter = ("is_active", "model")
    readonly_fields = ("rows", "columns", "summary", "calibrator", "baseline_metrics", "created_at")
