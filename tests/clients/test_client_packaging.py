"""`pip install ./clients/python` works: the package builds into a wheel that installs and imports
on its own, typed (py.typed) and with no runtime dependencies."""

import importlib.util
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.clients.conftest import CLIENT_SRC

PACKAGE = CLIENT_SRC.parent


def _pip(*args: str, cwd: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pip", *args], cwd=cwd, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_client_builds_into_a_wheel_that_installs_and_imports_on_its_own(tmp_path: Path) -> None:
    if importlib.util.find_spec("setuptools") is None:
        pytest.skip("setuptools (the client's build backend) is not in this environment: no offline build")
    source = tmp_path / "src-copy"  # built from a copy: the build writes egg-info and build/ beside it
    shutil.copytree(PACKAGE, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    _pip(
        "wheel",
        "--no-deps",
        "--no-build-isolation",
        "--no-index",
        "-w",
        str(tmp_path / "dist"),
        str(source),
        cwd=tmp_path,
    )
    (wheel,) = (tmp_path / "dist").glob("driftwatch_client-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        metadata = next(archive.read(n).decode() for n in names if n.endswith("METADATA"))
    assert {"driftwatch_client/__init__.py", "driftwatch_client/py.typed"} <= names
    assert "Requires-Dist" not in metadata  # standard library only
    _pip("install", "--no-deps", "--no-index", "--target", str(tmp_path / "site"), str(wheel), cwd=tmp_path)
    code = (
        "import driftwatch_client as c; print(c.__file__); "
        "m = c.Monitor(url='http://127.0.0.1:9', token='t', model='m'); m.log_label(1, 'yes'); m.close(0); "
        "print(m.stats().dropped['shutdown'])"
    )
    done = subprocess.run([sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(tmp_path / 'site')!r}); {code}"],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    where, dropped = done.stdout.split()
    assert where.startswith(str(tmp_path / "site")) and dropped == "1"
