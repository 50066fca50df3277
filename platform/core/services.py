"""Writes for the core app: API tokens."""

import secrets
from collections.abc import Sequence
from datetime import datetime

from django.contrib.auth.models import User
from django.db import transaction

from core.audit import Actor, audit_record
from core.models import ApiToken, Scope, hash_token

TOKEN_PREFIX = "dw_"


def api_token_create(
    *,
    user: User,
    scope: str,
    name: str = "",
    expires_at: datetime | None = None,
    model_names: Sequence[str] = (),
    rate_limit_per_minute: int | None = None,
    actor: Actor = "manage.py",
) -> tuple[ApiToken, str]:
    """Create a token and return it with its secret; the secret is shown once, stored hashed.

    `model_names` limits it to those models (empty: every model); `expires_at` ends it.
    """
    if scope not in Scope.values:
        raise ValueError(f"scope must be one of {', '.join(Scope.values)}, not {scope!r}")
    secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
    with transaction.atomic():
        token = ApiToken.objects.create(
            user=user,
            scope=scope,
            name=name,
            prefix=secret[:10],
            key_hash=hash_token(secret),
            expires_at=expires_at,
            model_names=sorted(set(model_names)),
            rate_limit_per_minute=rate_limit_per_minute,
        )
        audit_record(
            actor=actor,
            action="token.create",
            target=token,
            details={
                "user": user.get_username(),
                "scope": scope,
                "expires_at": expires_at.isoformat() if expires_at else None,
                "model_names": token.model_names,
            },
        )
    return token, secret
