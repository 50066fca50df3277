"""API tokens (stored as a SHA-256 of the secret, never the secret itself) and the audit log."""

import hashlib
from datetime import datetime

from django.conf import settings
from django.db import models


class Scope(models.TextChoices):
    INGEST = "ingest", "ingest: register models, post predictions, labels and references"
    READ = "read", "read: checks, alerts, models, jobs"
    ADMIN = "admin", "admin: everything, including retraining"


def hash_token(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


class ApiToken(models.Model):
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100, blank=True)
    scope = models.CharField(max_length=10, choices=Scope.choices)
    prefix = models.CharField(max_length=12, help_text="First characters, to recognise the token")
    key_hash = models.CharField(max_length=64, unique=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked = models.BooleanField(default=False)
    expires_at = models.DateTimeField(null=True, blank=True, help_text="refused from then on; empty: never")
    model_names = models.JSONField(
        default=list,
        blank=True,
        help_text="registered model names this token may act on; empty: every model",
    )
    rate_limit_per_minute = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="ingestion requests per minute; empty: DRIFTWATCH_INGEST_RATE_PER_MINUTE",
    )

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.scope}, {self.user})"

    def allows(self, scope: str) -> bool:
        """admin covers every scope; ingest and read cover only themselves."""
        return self.scope == Scope.ADMIN or self.scope == scope

    def allows_model(self, name: str | None) -> bool:
        """A model-limited token acts only under /models/<one of its names>/."""
        if not self.model_names:
            return True
        return name is not None and name in self.model_names

    def expired(self, now: datetime) -> bool:
        return self.expires_at is not None and self.expires_at <= now


class AuditEvent(models.Model):
    """Who did what to what, and when: one row per state change made by a person or a token."""

    at = models.DateTimeField(auto_now_add=True, db_index=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    actor_label = models.CharField(max_length=200, help_text="the user, token or process, as it was then")
    action = models.CharField(max_length=100, db_index=True, help_text="e.g. alert.acknowledge")
    target_type = models.CharField(max_length=100, blank=True)
    target_id = models.CharField(max_length=100, blank=True)
    target_label = models.CharField(max_length=300, blank=True)
    details = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [models.Index(fields=["target_type", "target_id"])]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.actor_label} {self.action} {self.target_label}"


class OutboxMessage(models.Model):
    """A task message the broker refused (it was down): kept here and re-sent when it is back."""

    name = models.CharField(max_length=200, help_text="the task's permanent name")
    args = models.JSONField(default=list)
    options = models.JSONField(default=dict, help_text="send_task options (queue, countdown, ...)")
    created_at = models.DateTimeField(auto_now_add=True)
    attempts = models.PositiveIntegerField(default=1)
    last_error = models.TextField(blank=True)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.name}{tuple(self.args)}"
