"""The folder platform/ must never shadow the standard-library module `platform`."""

import platform
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
STDLIB = sysconfig.get_paths()["stdlib"]


def test_platform_is_the_stdlib_module_under_pytest() -> None:
    assert platform.python_version() == ".".join(map(str, sys.version_info[:3]))
    assert platform.__file__.startswith(STDLIB)


def test_platform_is_the_stdlib_module_inside_the_django_app() -> None:
    code = "import platform, registry.models; print('VERSION', platform.python_version(), platform.__file__)"
    stdout = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    line = next(line for line in stdout.splitlines() if line.startswith("VERSION "))
    _, version, module_file = line.split()
    assert version == platform.python_version()
    assert module_file.startswith(STDLIB)


def test_platform_is_the_stdlib_module_inside_a_celery_worker(celery_worker: object) -> None:
    from workers.tasks.system import platform_info

    info = platform_info.delay().get(timeout=60)
    assert info["python_version"] == platform.python_version()
    assert info["module_file"].startswith(info["stdlib_dir"])
