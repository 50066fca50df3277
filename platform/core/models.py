"""API tokens: stored as a SHA-256 of the secret, never the secret itself."""

import hashlib

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

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.scope}, {self.user})"

    def allows(self, scope: str) -> bool:
        """admin covers every scope; ingest and read cover only themselves."""
        return self.scope == Scope.ADMIN or self.scope == scope
