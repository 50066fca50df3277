from django.urls import path

from registry import api

urlpatterns = [
    path("models", api.ModelListView.as_view(), name="api-models"),
    path("models/<str:name>", api.ModelDetailView.as_view(), name="api-model"),
    path("models/<str:name>/reference", api.ReferenceView.as_view(), name="api-reference"),
    path("models/<str:name>/versions", api.VersionListView.as_view(), name="api-versions"),
]
