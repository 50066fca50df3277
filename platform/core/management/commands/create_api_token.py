from argparse import ArgumentParser
from datetime import timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from core.models import Scope
from core.services import api_token_create


class Command(BaseCommand):
    help = "Create an API token for a user and print it once (only its hash is stored)."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("user", help="username (created if missing with --create-user)")
        parser.add_argument("--scope", required=True, choices=Scope.values)
        parser.add_argument("--name", default="")
        parser.add_argument("--create-user", action="store_true")
        parser.add_argument(
            "--expires-in-days", type=int, default=90, help="days until it is refused (default 90)"
        )
        parser.add_argument("--no-expiry", action="store_true", help="a token that never expires")
        parser.add_argument(
            "--model", action="append", default=[], help="limit it to this model (repeatable)"
        )
        parser.add_argument("--rate-limit", type=int, default=None, help="ingestion requests per minute")

    def handle(self, *args: Any, **options: Any) -> None:
        users = get_user_model().objects
        user = users.filter(username=options["user"]).first()
        if user is None and options["create_user"]:
            user = users.create(username=options["user"])
        if user is None:
            raise CommandError(f"no user {options['user']!r} (pass --create-user to create one)")
        if options["expires_in_days"] < 1:
            raise CommandError("--expires-in-days must be at least 1 (or pass --no-expiry)")
        expires = (
            None if options["no_expiry"] else timezone.now() + timedelta(days=options["expires_in_days"])
        )
        _, secret = api_token_create(
            user=user,
            scope=options["scope"],
            name=options["name"],
            expires_at=expires,
            model_names=options["model"],
            rate_limit_per_minute=options["rate_limit"],
            actor="manage.py create_api_token",
        )
        self.stdout.write(secret)
