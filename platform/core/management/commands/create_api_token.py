from argparse import ArgumentParser
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from core.models import Scope
from core.services import api_token_create


class Command(BaseCommand):
    help = "Create an API token for a user and print it once (only its hash is stored)."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("user", help="username (created if missing with --create-user)")
        parser.add_argument("--scope", required=True, choices=Scope.values)
        parser.add_argument("--name", default="")
        parser.add_argument("--create-user", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        users = get_user_model().objects
        user = users.filter(username=options["user"]).first()
        if user is None and options["create_user"]:
            user = users.create(username=options["user"])
        if user is None:
            raise CommandError(f"no user {options['user']!r} (pass --create-user to create one)")
        _, secret = api_token_create(user=user, scope=options["scope"], name=options["name"])
        self.stdout.write(secret)
