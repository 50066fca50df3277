import sys
from pathlib import Path

from django.apps import AppConfig
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from driftwatch.paths import dotted_name_reaching


def local_dirs() -> list[Path]:
    """The folders the local defaults write into: the SQLite files', collected static files' and
    kombu's filesystem broker's (media folders are made by the storage when it saves a file)."""
    dirs = [Path(settings.STATIC_ROOT)]
    database = settings.DATABASES["default"]
    if database["ENGINE"].endswith("sqlite3"):
        names = [database["NAME"], database.get("TEST", {}).get("NAME")]
        dirs += [Path(name).parent for name in names if name and name != ":memory:"]
    if str(settings.CELERY_BROKER_URL).startswith("filesystem://"):
        options = settings.CELERY_BROKER_TRANSPORT_OPTIONS
        keys = ("data_folder_in", "data_folder_out", "processed_folder", "control_folder")
        dirs += [Path(str(options[key])) for key in keys if options.get(key)]
    return dirs


def media_root_refuse_importable() -> None:
    """Uploaded files must never be importable: refuse a MEDIA_ROOT a dotted module name reaches."""
    reached = dotted_name_reaching(Path(settings.MEDIA_ROOT), [p for p in sys.path if isinstance(p, str)])
    if reached is not None:
        raise ImproperlyConfigured(
            f"DRIFTWATCH_MEDIA_ROOT={settings.MEDIA_ROOT} is importable as {reached!r} from sys.path: "
            "put uploads outside every import path (or under a folder whose name has a dot)"
        )


class CoreConfig(AppConfig):
    name = "core"
    verbose_name = "Access and health"

    def ready(self) -> None:
        from core import openapi  # noqa: F401  registers the token scheme with drf-spectacular

        media_root_refuse_importable()
        # Made when a process starts (django.setup), not when settings are imported.
        for path in local_dirs():
            path.mkdir(parents=True, exist_ok=True)
