"""The OpenAPI schema and its Swagger UI: for logged-in users and token holders, unless
DRIFTWATCH_PUBLIC_API_DOCS makes them public (read at request time)."""

from typing import Any

from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.http import HttpRequest
from django.http.response import HttpResponseBase
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView
from rest_framework.authentication import SessionAuthentication
from rest_framework.permissions import BasePermission, IsAuthenticated

from core.auth import BearerTokenAuthentication


def _docs_permissions() -> list[BasePermission]:
    return [] if settings.DRIFTWATCH_PUBLIC_API_DOCS else [IsAuthenticated()]


class SchemaView(SpectacularAPIView):
    authentication_classes = [BearerTokenAuthentication, SessionAuthentication]

    def get_permissions(self) -> list[BasePermission]:
        return _docs_permissions()


class DocsView(SpectacularSwaggerSplitView):
    authentication_classes = [SessionAuthentication]

    def get_permissions(self) -> list[BasePermission]:
        return _docs_permissions()

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        if not settings.DRIFTWATCH_PUBLIC_API_DOCS and not request.user.is_authenticated:
            return redirect_to_login(request.get_full_path())
        return super().dispatch(request, *args, **kwargs)
