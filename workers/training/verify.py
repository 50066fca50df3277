"""Does an uploaded artifact rebuild? Asked of a child process, never of the web process.

Building a model calls its recipe's factory: code from an allowed module, but run with a client's
hyperparameters (a huge ``hidden`` is an allocation, a factory may do anything). The web process
only validates the structure (``artifacts.read_bundle``); this module builds the model and loads
the weights in a separate interpreter with a time limit, and reports one line back.

Protocol: stdin is a JSON header line ``{"recipe": ..., "allowed": [...]}`` then the artifact's
bytes; the exit status is 0 when the weights load, else 1 with the reason on stdout.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterable
from typing import Any

VERIFY_TIMEOUT_S = 120.0  # a cold torch import takes seconds on a loaded host


class VerifyError(ValueError):
    """The artifact does not rebuild under its recipe (the reason is the message)."""


def verify_artifact(
    raw: bytes, *, recipe: dict[str, Any] | None, allowed: Iterable[str], timeout_s: float = VERIFY_TIMEOUT_S
) -> None:
    """Build the recipe's model in a child process and load the weights; VerifyError says why not."""
    header = json.dumps({"recipe": recipe, "allowed": sorted(allowed)}).encode() + b"\n"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    try:
        done = subprocess.run(
            [sys.executable, "-m", "workers.training.verify"],
            input=header + raw,
            capture_output=True,
            timeout=timeout_s,
            env=env,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise VerifyError(f"building the recipe's model took over {timeout_s:g} s") from None
    if done.returncode != 0:
        reason = done.stdout.decode(errors="replace").strip().splitlines()
        raise VerifyError(reason[-1] if reason else f"the check ended with status {done.returncode}")


def _child() -> int:
    from workers.training.artifacts import bundle_from_bytes
    from workers.training.recipes import allow_recipe_modules

    stream = sys.stdin.buffer
    try:
        header = json.loads(stream.readline())
        allow_recipe_modules(header["allowed"])
        bundle_from_bytes(stream.read(), recipe=header["recipe"])
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # SystemExit from a factory is an answer too, not a crash
        print(f"{type(exc).__name__}: {exc}".replace("\n", " "), flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(_child())
