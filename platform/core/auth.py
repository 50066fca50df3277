"""Bearer-token authentication, scope and model permissions, and the per-token ingestion rate."""

import logging
import time
from datetime import datetime, timedelta

from django.conf import settings
from django.core.cache import cache
from django.utils import timezone
from rest_framework import authentication, exceptions, permissions, throttling
from rest_framework.request import Request

from core.models import ApiToken, hash_token
from core.unavailable import broker_errors

logger = logging.getLogger(__name__)

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
        now = timezone.now()
        if token.expired(now):
            raise exceptions.AuthenticationFailed("this token has expired")
        self._touch(token, now)
        return token.user, token

    def authenticate_header(self, request: Request) -> str:
        return self.keyword

    @staticmethod
    def _touch(token: ApiToken, now: datetime) -> None:
        if token.last_used_at is None or now - token.last_used_at > LAST_USED_RESOLUTION:
            ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)


class HasScope(permissions.BasePermission):
    """The view declares `required_scopes = {"GET": "read", "POST": "ingest"}`; a token limited
    to some models acts only on URLs naming one of them."""

    message = "this token's scope does not allow this request"

    def has_permission(self, request: Request, view: object) -> bool:
        token = request.auth
        if not isinstance(token, ApiToken):
            raise exceptions.NotAuthenticated()
        needed = getattr(view, "required_scopes", {}).get(request.method or "", "admin")
        if not token.allows(needed):
            self.message = f"this request needs a token with scope '{needed}' (this one has '{token.scope}')"
            return False
        name = getattr(view, "kwargs", {}).get("name")
        if not token.allows_model(name):
            self.message = f"this token is limited to the models {', '.join(token.model_names)}"
            return False
        return True


def _count_in_window(key: str) -> int:
    cache.add(key, 0, timeout=120)
    try:
        return int(cache.incr(key))
    except ValueError:  # expired between add and incr: this request starts the window
        cache.set(key, 1, timeout=120)
        return 1


class IngestRateThrottle(throttling.BaseThrottle):
    """Ingestion requests per token per minute (fixed window in the cache: Redis when configured).

    Over the limit: 429 with Retry-After (seconds until the window ends). The token's own
    `rate_limit_per_minute` overrides DRIFTWATCH_INGEST_RATE_PER_MINUTE; 0 turns it off.
    """

    def __init__(self) -> None:
        self.retry_after: float | None = None

    def allow_request(self, request: Request, view: object) -> bool:
        token = request.auth
        if not isinstance(token, ApiToken):
            return True
        if getattr(view, "required_scopes", {}).get(request.method or "") != "ingest":
            return True
        limit = token.rate_limit_per_minute
        if limit is None:
            limit = settings.DRIFTWATCH_INGEST_RATE_PER_MINUTE
        if not limit:
            return True
        now = time.time()
        window = int(now // 60)
        key = f"driftwatch:ingest-rate:{token.key_hash[:24]}:{window}"
        try:
            count = _count_in_window(key)
        except broker_errors() as exc:
            # The limiter lives in Redis; ingestion must keep accepting while Redis is down.
            logger.warning("rate limit not applied: the cache is unreachable (%r)", exc)
            return True
        if count <= limit:
            return True
        self.retry_after = max(1.0, (window + 1) * 60 - now)
        return False

    def wait(self) -> float | None:
        return self.retry_after
