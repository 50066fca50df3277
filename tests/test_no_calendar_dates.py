"""No test names a calendar date: a fixed date silently becomes past or future as the clock moves
(the suite broke on a fresh clone the day after its dates were written). Tests derive times from
tests/clock.py (which holds none either) and move the wall clock with time-machine."""

import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent
MONTHS = "Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec"
DATE_LITERALS = re.compile(
    "|".join(
        (
            r"\b(?:datetime|date|Timestamp)\(\s*[012]\d{3}\s*,",  # datetime(YYYY, …), over lines too
            r"\b[012]\d{3}-[01]\d-[0-3]\d\b",  # ISO dates, in strings of any kind
            r"\b[0-3]\d/(?:" + MONTHS + r")/\d{4}\b",  # access-log dates
            r"""["'][12]\d{3}-""",  # a year prefix: "YYYY-…"
            r"\b1_?[5-9]\d\d_?\d{3}_?\d{3}\b",  # epoch seconds of the years around now
        )
    )
)


def calendar_dates(text: str) -> list[tuple[int, str]]:
    """(line number, matched text) of each calendar-date literal in `text`."""
    return [(text.count("\n", 0, m.start()) + 1, m.group()) for m in DATE_LITERALS.finditer(text)]


def test_the_scan_finds_each_kind_of_calendar_date() -> None:
    year = "20" + "26"  # built at run time, so this file holds no literal itself
    planted = [
        f"T0 = datetime({year}, 11, 30, 8, 0, tzinfo=UTC)",
        f"NOW = datetime(\n    {year}, 11, 30)",
        f'body = {{"end": "{year}-11-30T08:00:00Z"}}',
        f"'127.0.0.1 - - [01/Dec/{year}:02:55:05 +0000]'",
        f'label.startswith("{year}-")',
        f"time_ticks(1_{764}_489_600, 1{764}489600)",
        f'pd.Timestamp("{year}-11-30", tz="UTC")',
    ]
    for text in planted:
        assert calendar_dates(text), text
    assert [line for line, _ in calendar_dates("x = 1\n" + planted[1])] == [2]


def test_the_scan_leaves_times_derived_from_the_clock_alone() -> None:
    derived = [
        "T0 = NOW.replace(hour=8) - timedelta(days=3)",
        'f"no predictions between {minute(at(hours=-1))} UTC and {minute(T0)} UTC"',
        "window_size=2048, budget=1_000_000_000, seed=2024",
        'iso(at(hours=4), tz=False) + "+23:00"',
    ]
    assert [calendar_dates(text) for text in derived] == [[]] * len(derived)


def test_no_test_file_names_a_calendar_date() -> None:
    found = [
        f"{path.relative_to(TESTS.parent)}:{line}: {text!r}"
        for path in sorted(TESTS.rglob("*"))
        if path.is_file() and path.suffix in {".py", ".txt", ".json", ".csv", ".log", ".html"}
        for line, text in calendar_dates(path.read_text(encoding="utf-8", errors="replace"))
    ]
    assert not found, "derive these from tests/clock.py instead:\n" + "\n".join(found)


def date_bearing() -> set[str]:
    lines = (TESTS / "date_bearing.txt").read_text().splitlines()
    return {line.strip() for line in lines if line.strip() and not line.startswith("#")}


def test_every_module_on_the_test_clock_is_rerun_under_faketime() -> None:
    on_the_clock = {
        str(path.relative_to(TESTS.parent))
        for path in TESTS.rglob("test_*.py")
        if "browser" not in path.parts and re.search(r"^from tests\.clock import", path.read_text(), re.M)
    }
    listed = date_bearing()
    assert on_the_clock - listed == set(), "add these to tests/date_bearing.txt"
    assert [p for p in sorted(listed) if not (TESTS.parent / p).is_file()] == []
