"""The README's settings table stays true: every environment variable the code reads is a row, and
every DRIFTWATCH_* row is still read somewhere. Variables read only by tests and benchmarks are
named in the same section."""

import re
from pathlib import Path

from driftwatch.env import RENAMED

ROOT = Path(__file__).resolve().parents[1]
NAME = r"([A-Z][A-Z0-9_]+)"
# How the code reads the environment: the settings helpers and os.environ / os.getenv.
ENVIRON = [
    re.compile(rf"\bos\.environ\.get\(\s*\"{NAME}\""),
    re.compile(rf"\bos\.environ\[\s*\"{NAME}\"\s*\]"),
    re.compile(rf"\bos\.getenv\(\s*\"{NAME}\""),
]
HELPERS = [
    re.compile(rf"\benv_(?:str|bool|int|list|set|choice)\(\s*\"{NAME}\""),
    re.compile(rf"\bos\.environ\.setdefault\(\s*\"{NAME}\""),  # a default for Django to read
]
# driftwatch/backends.py also names variables in tuples and pairs: any whole literal there counts.
LITERAL = re.compile(r"\"(DRIFTWATCH_[A-Z0-9_]+)\"")
ROW = re.compile(r"^\| `([A-Z][A-Z0-9_]+)` \|", re.MULTILINE)


def python_files(*folders: str) -> list[Path]:
    return [path for folder in folders for path in sorted((ROOT / folder).rglob("*.py"))]


def names_read(files: list[Path], patterns: list[re.Pattern[str]]) -> set[str]:
    found: set[str] = set()
    for path in files:
        text = path.read_text()
        for pattern in patterns:
            found.update(pattern.findall(text))
        if path.name == "backends.py":
            found.update(LITERAL.findall(text))
    return found


def settings_section() -> str:
    readme = (ROOT / "README.md").read_text()
    start = readme.index("\n## Settings\n")
    return readme[start : readme.index("\n## ", start + 1)]


def product_reads() -> set[str]:
    return names_read([*python_files("platform", "workers"), ROOT / "manage.py"], [*ENVIRON, *HELPERS])


def reads_by_tests_and_benchmarks() -> set[str]:
    return names_read(python_files("tests", "bench"), ENVIRON)


def test_every_variable_the_code_reads_is_a_row_of_the_settings_table() -> None:
    read = product_reads()
    assert {
        "SECRET_KEY",
        "DATABASE_URL",
        "REDIS_URL",
        "DRIFTWATCH_EMAIL_PORT",
        "DRIFTWATCH_S3_BUCKET",
    } <= read
    assert sorted(read - set(ROW.findall(settings_section()))) == []


def test_every_driftwatch_row_is_still_read_by_the_code() -> None:
    rows = {name for name in ROW.findall(settings_section()) if name.startswith("DRIFTWATCH_")}
    assert sorted(rows - product_reads()) == []


def test_variables_read_by_tests_and_benchmarks_are_named_in_the_settings_section() -> None:
    section = settings_section()
    read = reads_by_tests_and_benchmarks()
    assert "DRIFTWATCH_CHROMIUM" in read
    assert sorted(name for name in read if f"`{name}`" not in section) == []


def test_no_renamed_variable_is_read_anywhere() -> None:
    assert sorted((product_reads() | reads_by_tests_and_benchmarks()) & set(RENAMED)) == []
