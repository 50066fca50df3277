"""ASGI entry point."""

import os

from driftwatch.paths import ensure_import_paths

ensure_import_paths()
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "driftwatch.settings")

from django.core.asgi import get_asgi_application  # noqa: E402

application = get_asgi_application()
