from django.contrib import admin
from django.urls import include, path

from core.docs import DocsView, SchemaView
from core.health import healthz

api_v1 = [
    path("", include("registry.urls")),
    path("", include("monitoring.urls")),
    path("", include("retraining.urls")),
]

urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("", include("observability.urls")),
    path("admin/", admin.site.urls),
    path("api/v1/", include(api_v1)),
    path(
        "api/schema/",
        SchemaView.as_view(),
        name="schema",
    ),
    path(
        "api/docs/",
        DocsView.as_view(url_name="schema"),
        name="api-docs",
    ),
    path("", include("dashboard.urls")),
]

handler404 = "core.not_found.not_found"
