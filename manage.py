#!/usr/bin/env python
"""Django's command-line entry point for driftwatch."""

import os
import sys
from pathlib import Path

# platform/ itself goes on sys.path, never as a package: a package named `platform` would
# shadow the standard-library module that Django, Celery, torch and pip import.
ROOT = Path(__file__).resolve().parent
sys.path[:0] = [str(ROOT / "platform"), str(ROOT)]


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "driftwatch.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
