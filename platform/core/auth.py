"""Bearer-token authentication and scope permissions for the REST API."""

from datetime import timedelta

from django.utils import timezone
from rest_framework import authentication, exceptions, permissions
from rest_framework.request import Request

from core.models import ApiToken, hash_token

# Writing last_used_at on every request would add a write to each ingestion call.
LAST_USED_RESOLUTION = timedelta(minutes=1)


class BearerTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request: Request) -> tuple[object, ApiToken] | None:
        header = authentication.get_authorization_header(request).decode("latin-1")
        if not header:
            return None
        keyword, _, secret = header.partition(" ")
        if keyword != self.keyword or not secret.strip():
            raise exceptions.AuthenticationFailed("Authorization header must be 'Bearer <token>'")
        token = (
            ApiToken.objects.select_related("user")
            .filter(key_hash=hash_token(secret.strip()), revoked=False)
            .first()
        )
        if token is None or not token.user.is_active:
            raise exceptions.AuthenticationFailed("invalid or revoked token")
        self._touch(token)
        return token.user, token

    def authenticate_header(self, request: Request) -> str:
        return self.keyword

    @staticmethod
    def _touch(token: ApiToken) -> None:
        now = timezone.now()
        if token.last_used_at is None or now - token.last_used_at > LAST_USED_RESOLUTION:
            ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)


class HasScope(permissions.BasePermission):
    """The view declares `required_scopes = {"GET": "read", "POST": "ingest"}`."""

    message = "this token's scope does not allow this request"

    def has_permission(self, request: Request, view: object) -> bool:
        token = request.auth
        if not isinstance(token, ApiToken):
            raise exceptions.NotAuthenticated()
        needed = getattr(view, "required_scopes", {}).get(request.method or "", "admin")
        if not token.allows(needed):
            self.message = f"this request needs a token with scope '{needed}' (this one has '{token.scope}')"
            return False
        return True
