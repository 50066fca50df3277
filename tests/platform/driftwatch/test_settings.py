"""Secure defaults: DEBUG off unless asked for, a per-install secret key, a clean `check --deploy`;
one prefix for the environment (old DJANGO_* names stop the process)."""

import os
import secrets
import stat
import subprocess
import sys
from pathlib import Path

from demo.management.commands.run_platform import child_environment, debug_warning
from driftwatch.paths import ROOT
from driftwatch.settings import local_secret_key


def manage(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    # Not inherited: DJANGO_ALLOW_ASYNC_UNSAFE (set by the browser tests) and any renamed DJANGO_* name.
    base = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "DRIFTWATCH_HTTPS"))}
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_debug_is_off_unless_asked_for() -> None:
    result = manage("shell", "-c", "from django.conf import settings; print(settings.DEBUG)")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "False"


def test_check_deploy_is_clean_with_production_settings() -> None:
    result = manage(
        "check",
        "--deploy",
        SECRET_KEY=secrets.token_urlsafe(50),
        DRIFTWATCH_HTTPS="1",
        DRIFTWATCH_PROXY_SSL_HEADER="HTTP_X_FORWARDED_PROTO",
    )
    found = [line for line in (result.stdout + result.stderr).splitlines() if line.startswith("?: (")]
    # Left for the output serializers (issue 9): drf-spectacular cannot guess four APIView bodies.
    assert [line for line in found if "drf_spectacular.W002" not in line] == []


def test_settings_are_read_under_the_one_prefix() -> None:
    code = (
        "from django.conf import settings as s; "
        "print(s.DEBUG, s.SECRET_KEY, s.ALLOWED_HOSTS, s.CSRF_TRUSTED_ORIGINS, s.EMAIL_BACKEND)"
    )
    result = manage(
        "shell",
        "-c",
        code,
        DRIFTWATCH_DEBUG="1",
        SECRET_KEY="k" * 50,
        DRIFTWATCH_ALLOWED_HOSTS="a.example, b.example",
        DRIFTWATCH_CSRF_TRUSTED_ORIGINS="https://a.example",
        DRIFTWATCH_EMAIL_BACKEND="dummy",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == (
        f"True {'k' * 50} ['a.example', 'b.example'] ['https://a.example'] "
        "django.core.mail.backends.dummy.EmailBackend"
    )


def test_an_old_django_name_stops_startup_naming_the_new_variable() -> None:
    result = manage("check", DJANGO_SECRET_KEY="old", DJANGO_ALLOWED_HOSTS="a.example")
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr
    assert "DJANGO_SECRET_KEY is no longer read, set SECRET_KEY instead" in result.stderr
    assert "DJANGO_ALLOWED_HOSTS is no longer read, set DRIFTWATCH_ALLOWED_HOSTS instead" in result.stderr


def test_a_bad_value_stops_startup_naming_the_variable() -> None:
    result = manage("check", DRIFTWATCH_EMAIL_PORT="smtp")
    assert result.returncode != 0
    assert "ImproperlyConfigured: DRIFTWATCH_EMAIL_PORT='smtp' is not an integer" in result.stderr


def test_run_platform_debug_flag_changes_only_the_environment_of_its_children() -> None:
    before = dict(os.environ)
    assert child_environment(debug=True)["DRIFTWATCH_DEBUG"] == "1"
    assert dict(os.environ) == before
    assert child_environment(debug=False).get("DRIFTWATCH_DEBUG") == os.environ.get("DRIFTWATCH_DEBUG")
    assert "DEBUG is ON for this run only" in debug_warning("http://127.0.0.1:8000")


def test_secret_key_without_the_variable_is_random_per_install_and_private(tmp_path: Path) -> None:
    first = local_secret_key(tmp_path / "a" / "secret_key")
    assert local_secret_key(tmp_path / "a" / "secret_key") == first
    assert local_secret_key(tmp_path / "b" / "secret_key") != first
    assert len(first) >= 50
    assert stat.S_IMODE((tmp_path / "a" / "secret_key").stat().st_mode) == 0o600


def _fresh_var_dir_process(tmp_path: Path, code: str) -> Path:
    var_dir = tmp_path / "var"
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env.update(DRIFTWATCH_VAR_DIR=str(var_dir), SECRET_KEY=secrets.token_urlsafe(50))
    env.update(DJANGO_SETTINGS_MODULE="driftwatch.settings", PYTHONPATH=f"{ROOT / 'platform'}:{ROOT}")
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    return var_dir


def test_importing_settings_creates_no_folders(tmp_path: Path) -> None:
    var_dir = _fresh_var_dir_process(tmp_path, "import driftwatch.settings")
    assert not var_dir.exists()


def test_django_setup_makes_the_sqlite_static_and_broker_folders(tmp_path: Path) -> None:
    var_dir = _fresh_var_dir_process(tmp_path, "import django; django.setup()")
    made = {p.relative_to(var_dir).as_posix() for p in var_dir.rglob("*") if p.is_dir()}
    assert {"staticfiles", "broker", "broker/queue", "broker/processed", "broker/control"} <= made
