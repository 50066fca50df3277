from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "core"
    verbose_name = "Access and health"

    def ready(self) -> None:
        from core import openapi  # noqa: F401  registers the token scheme with drf-spectacular
