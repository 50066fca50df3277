"""The audit log: `audit_record(actor=..., action=..., target=..., details=...)` for every state
change made by a person, a token or a process. Callers record inside the transaction that makes
the change, so the row exists exactly when the change does."""

import logging
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import models

from core.models import ApiToken, AuditEvent

logger = logging.getLogger(__name__)

# Who acted: a user (dashboard, admin), a token (API: recorded with its user), or a process name.
Actor = AbstractBaseUser | AnonymousUser | ApiToken | str | None


def _actor(actor: Actor) -> tuple[Any, str]:
    if isinstance(actor, ApiToken):
        return actor.user, f"{actor.user} (token {actor.prefix}…)"
    if isinstance(actor, AbstractBaseUser):
        return actor, str(actor.get_username())
    if isinstance(actor, str):
        return None, actor
    return None, "system"


def _target(target: models.Model | str | None) -> tuple[str, str, str]:
    if isinstance(target, models.Model):
        meta = target._meta
        return f"{meta.app_label}.{meta.model_name}", str(target.pk), str(target)[:300]
    return "", "", (target or "")[:300]


def audit_record(
    *,
    actor: Actor,
    action: str,
    target: models.Model | str | None = None,
    details: dict[str, Any] | None = None,
) -> AuditEvent:
    """Store one audit event; `action` is `<thing>.<verb>`, e.g. `policy.update`."""
    user, label = _actor(actor)
    target_type, target_id, target_label = _target(target)
    event = AuditEvent.objects.create(
        actor=user,
        actor_label=label[:200],
        action=action,
        target_type=target_type,
        target_id=target_id,
        target_label=target_label,
        details=details or {},
    )
    logger.info("audit %s by %s on %s %s", action, label, target_type or "-", target_id or target_label)
    return event


def request_actor(request: Any) -> Actor:
    """The API token when the request carries one, else the logged-in user."""
    token = getattr(request, "auth", None)
    if isinstance(token, ApiToken):
        return token
    user = getattr(request, "user", None)
    return user if isinstance(user, AbstractBaseUser) else None
