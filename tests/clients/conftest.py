"""The client is tested from its source tree (never pip-installed into the shared venv)."""

import sys
from pathlib import Path

CLIENT_SRC = Path(__file__).resolve().parents[2] / "clients" / "python" / "src"
if str(CLIENT_SRC) not in sys.path:
    sys.path.insert(0, str(CLIENT_SRC))
