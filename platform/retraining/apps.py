from typing import Any

from django.apps import AppConfig
from django.db.models.signals import post_migrate


def _ensure_beat(sender: AppConfig, **kwargs: Any) -> None:
    # Here, at migrate time: scheduling imports models, which cannot load while apps are set up.
    from retraining.scheduling import beat_schedule_ensure

    beat_schedule_ensure()


class RetrainingConfig(AppConfig):
    name = "retraining"
    verbose_name = "Retraining"

    def ready(self) -> None:
        post_migrate.connect(_ensure_beat, sender=self)
