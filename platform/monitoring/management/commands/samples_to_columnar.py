from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from monitoring.store.migrate import BATCH, NoPayload, samples_move, store_counts
from registry.models import RegisteredModel


class Command(BaseCommand):
    help = (
        "Move samples stored as JSON rows (an install from before the columnar store) into the "
        "columnar store (resumable: run it again after a kill), then verify each model's counts "
        "and sample-id checksum; `migrate` then drops the JSON columns (monitoring 0031)."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--model", action="append", default=[], help="only this model (repeatable)")
        parser.add_argument("--batch", type=int, default=BATCH, help=f"rows per part batch (default {BATCH})")

    def handle(self, *args: Any, **options: Any) -> None:
        models = RegisteredModel.objects.order_by("name")
        if options["model"]:
            models = models.filter(name__in=options["model"])
            missing = sorted(set(options["model"]) - set(models.values_list("name", flat=True)))
            if missing:
                raise CommandError(f"no model named {missing}")
        failed = []
        for model in models:
            try:
                moved = samples_move(model=model, batch=options["batch"])
            except NoPayload as error:
                raise CommandError(str(error)) from None
            counts = store_counts(model=model)
            ok = counts.consistent and counts.unmoved == 0
            self.stdout.write(
                f"{model.name}: moved {moved}; index {counts.indexed}, in parts {counts.in_parts}, "
                f"left {counts.unmoved}; checksum {counts.index_checksum} / {counts.parts_checksum} "
                + ("ok" if ok else "MISMATCH")
            )
            if not ok:
                failed.append(model.name)
        if failed:
            raise CommandError(f"not verified: {failed}")
