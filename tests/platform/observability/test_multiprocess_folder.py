"""The multiprocess folder: emptied of the library's files at start, and nothing else of it."""

from pathlib import Path

from prometheus_client.mmap_dict import MmapedDict, mmap_key

from observability.multiprocess import folder_prepare, process_fold


def write(path: Path, values: dict[str, float]) -> None:
    out = MmapedDict(str(path))
    for key, value in values.items():
        out.write_value(key, value, 0.0)
    out.close()


def read(path: Path) -> dict[str, float]:
    return {key: value for key, value, _, _ in MmapedDict.read_all_values_from_file(str(path))}


def test_preparing_an_operators_folder_removes_only_the_librarys_files(tmp_path: Path) -> None:
    (tmp_path / "counter_12.db").write_bytes(b"x")
    (tmp_path / "notes.txt").write_text("kept")
    folder_prepare(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]


def test_folding_two_dead_workers_keeps_the_sum_of_their_counts(tmp_path: Path) -> None:
    key = mmap_key("driftwatch_x", "driftwatch_x_total", ["model"], ["m"], "help")
    other = mmap_key("driftwatch_x", "driftwatch_x_total", ["model"], ["n"], "help")
    write(tmp_path / "counter_101.db", {key: 3.0})
    write(tmp_path / "counter_102.db", {key: 4.0, other: 1.0})
    write(tmp_path / "gauge_livesum_101.db", {key: 1.0})
    assert process_fold(101, tmp_path) == 2
    assert process_fold(102, tmp_path) == 1
    assert sorted(p.name for p in tmp_path.glob("*.db")) == ["counter_archive.db"]
    assert read(tmp_path / "counter_archive.db") == {key: 7.0, other: 1.0}
