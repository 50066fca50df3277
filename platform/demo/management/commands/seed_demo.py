import json
from argparse import ArgumentParser
from dataclasses import asdict
from typing import Any

from django.core.management.base import BaseCommand

from demo.services import demo_seed


class Command(BaseCommand):
    help = "Create the admin login, the demo model (trained now) and an ingest token. Idempotent."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument(
            "--json", action="store_true", help="print the seed as one JSON line (run_platform)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        seed = demo_seed()
        if options["json"]:
            self.stdout.write(json.dumps(asdict(seed)))
            return
        if seed.admin_password:
            self.stdout.write(f"admin login: {seed.admin_username} / {seed.admin_password}")
        else:
            self.stdout.write(f"admin login: {seed.admin_username} (existing; password unchanged)")
        self.stdout.write(
            f"demo model: {'trained and registered' if seed.created_model else 'already there'}"
        )
        self.stdout.write(f"INGEST_TOKEN={seed.ingest_token}")
