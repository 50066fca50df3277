"""Writes for the core app: API tokens."""

import secrets

from django.contrib.auth.models import User

from core.models import ApiToken, Scope, hash_token

TOKEN_PREFIX = "dw_"


def api_token_create(*, user: User, scope: str, name: str = "") -> tuple[ApiToken, str]:
    """Create a token and return it with its secret; the secret is shown once, stored hashed."""
    if scope not in Scope.values:
        raise ValueError(f"scope must be one of {', '.join(Scope.values)}, not {scope!r}")
    secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken.objects.create(
        user=user, scope=scope, name=name, prefix=secret[:10], key_hash=hash_token(secret)
    )
    return token, secret
