from core.admin_columns import EMPTY, clipped, duration, short_time, size
from tests.clock import at, minute


def test_short_time_is_minutes_in_one_format() -> None:
    assert short_time(at(hours=2, minutes=5, seconds=59)) == minute(at(hours=2, minutes=5))
    assert short_time(None) == EMPTY


def test_clipped_text_keeps_the_whole_in_its_tooltip_escaped() -> None:
    long = "<b>" + "x" * 100
    shown = clipped(long, 20)
    assert shown.startswith('<span title="&lt;b&gt;xxx') and shown.endswith("…</span>")
    assert clipped("short", 20) == "short"


def test_sizes_and_durations_read_as_a_person_would_say_them() -> None:
    assert size(12_884_901_888) == "12.0 GB" and size(None) == EMPTY
    assert duration(12.34) == "12.3 s" and duration(1234.5) == "21 min" and duration(9000) == "2.5 h"
    assert duration(None) == EMPTY
