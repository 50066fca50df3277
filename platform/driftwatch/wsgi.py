"""WSGI entry point (gunicorn driftwatch.wsgi with platform/ on the path, see run script)."""

import os

from driftwatch.paths import ensure_import_paths

ensure_import_paths()
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "driftwatch.settings")

from django.core.wsgi import get_wsgi_application  # noqa: E402

application = get_wsgi_application()
