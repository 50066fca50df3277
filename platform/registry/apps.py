from typing import Any

from django.apps import AppConfig
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed

from workers.training.recipes import allow_recipe_modules


def recipe_modules_configure() -> None:
    """Hand the operator's DRIFTWATCH_RECIPE_MODULES to the engine's one allow-list check."""
    try:
        allow_recipe_modules(settings.DRIFTWATCH_RECIPE_MODULES)
    except ValueError as exc:
        raise ImproperlyConfigured(f"DRIFTWATCH_RECIPE_MODULES: {exc}") from None


def _setting_changed(setting: str, **kwargs: Any) -> None:
    if setting == "DRIFTWATCH_RECIPE_MODULES":  # override_settings in tests
        recipe_modules_configure()


class RegistryConfig(AppConfig):
    name = "registry"
    verbose_name = "Model registry"

    def ready(self) -> None:
        recipe_modules_configure()
        setting_changed.connect(_setting_changed)
