"""module_utils/_out/output_files.py: a run's output files written in one step (write_files), bad input refused
with every reason before anything is written (check_files)."""

from __future__ import annotations

import os
import stat

import pytest

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError
from ansible_collections.gpusplit.k8s.plugins.module_utils._out.output_files import (
    check_files,
    parse_mode,
    write_files,
)


def mode_of(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def test_creates_the_folder_and_writes_every_file(tmp_path):
    out = tmp_path / "a" / "out"
    result = write_files(str(out), {"plan.json": "{}\n", "fleet.svg": {"content": "<svg/>", "mode": "0600"}})
    assert result["changed"] and result["created_dir"]
    assert result["written"] == ["plan.json", "fleet.svg"] and result["unchanged"] == []
    assert (out / "plan.json").read_text() == "{}\n" and (out / "fleet.svg").read_text() == "<svg/>"
    assert mode_of(out / "plan.json") == 0o644 and mode_of(out / "fleet.svg") == 0o600
    assert mode_of(out) == 0o755 & ~_umask()
    assert result["paths"] == [str(out / "plan.json"), str(out / "fleet.svg")]
    assert not [p for p in os.listdir(out) if p.startswith(".")]  # no temporary file left


def _umask():
    current = os.umask(0)
    os.umask(current)
    return current


def test_an_unchanged_file_is_not_written_again(tmp_path):
    write_files(str(tmp_path), {"plan.json": "{}\n", "b.json": "1\n"})
    before = os.stat(tmp_path / "plan.json")
    again = write_files(str(tmp_path), {"plan.json": "{}\n", "b.json": "2\n"})
    assert again["changed"] and again["written"] == ["b.json"] and again["unchanged"] == ["plan.json"]
    assert os.stat(tmp_path / "plan.json").st_ino == before.st_ino  # not replaced
    assert (tmp_path / "b.json").read_text() == "2\n"
    quiet = write_files(str(tmp_path), {"plan.json": "{}\n", "b.json": "2\n"})
    assert not quiet["changed"] and quiet["written"] == [] and not quiet["created_dir"]


def test_a_mode_alone_is_set_without_rewriting(tmp_path):
    write_files(str(tmp_path), {"a": "x"})
    inode = os.stat(tmp_path / "a").st_ino
    result = write_files(str(tmp_path), {"a": {"content": "x", "mode": "0640"}})
    assert result["written"] == ["a"] and mode_of(tmp_path / "a") == 0o640
    assert os.stat(tmp_path / "a").st_ino == inode


def test_check_mode_writes_nothing_and_says_what_would_change(tmp_path):
    out = tmp_path / "out"
    result = write_files(str(out), {"a": "x"}, check_mode=True, diff=True)
    assert result["changed"] and result["created_dir"] and result["written"] == ["a"]
    assert not out.exists()
    assert result["diff"] == [
        {"before": "", "after": "x", "before_header": f"{out}/a (absent)", "after_header": f"{out}/a"}
    ]
    write_files(str(out), {"a": "x", "b": "old"})
    result = write_files(str(out), {"a": "x", "b": "new"}, check_mode=True, diff=True)
    assert result["written"] == ["b"] and (out / "b").read_text() == "old"
    assert result["diff"] == [
        {"before": "old", "after": "new", "before_header": f"{out}/b", "after_header": f"{out}/b"}
    ]


def test_a_file_that_is_not_utf8_is_replaced(tmp_path):
    (tmp_path / "a").write_bytes(b"\xff\xfe")
    result = write_files(str(tmp_path), {"a": "text"})
    assert result["written"] == ["a"] and (tmp_path / "a").read_text() == "text"


@pytest.mark.parametrize(
    ("directory", "files", "expected"),
    [
        ("", {"a": "x"}, ["dir: expected the output folder's path, got string ''"]),
        (None, {"a": "x"}, ["dir: expected the output folder's path, got null None"]),
        ("out", {}, ["files: expected a mapping of file name to text (at least one), got mapping"]),
        ("out", ["a"], ["files: expected a mapping of file name to text (at least one), got list"]),
        (
            "out",
            {"../a": "x"},
            ["files['../a']: a file name without '/' is expected (the file is written in dir)"],
        ),
        (
            "out",
            {"..": "x"},
            ["files['..']: a file name without '/' is expected (the file is written in dir)"],
        ),
        ("out", {"a": 3}, ["files['a']: expected the file's text (a string), got integer"]),
        (
            "out",
            {"a": {"content": "x", "owner": "root"}},
            ["files['a']: unknown key(s) owner (content, mode)"],
        ),
        (
            "out",
            {"a": {"content": "x", "mode": "rw"}},
            ["files['a'].mode: 'rw' is not an octal mode such as '0644'"],
        ),
        (
            "out",
            {"a": {"content": "x", "mode": "17777"}},
            ["files['a'].mode: '17777' is not a file mode (0000 to 7777 in octal)"],
        ),
        (
            "out",
            {"a": None, "b/c": "x"},
            [
                "files['a']: expected the file's text (a string), got null",
                "files['b/c']: a file name without '/' is expected (the file is written in dir)",
            ],
        ),
    ],
)
def test_bad_input_is_refused_with_every_reason(tmp_path, directory, files, expected):
    target = directory if not directory or directory.startswith("/") else str(tmp_path / directory)
    with pytest.raises(GpusplitError) as info:
        write_files(target, files)
    assert info.value.errors == expected
    assert list(tmp_path.iterdir()) == []  # nothing created


def test_a_bad_file_of_several_stops_all_of_them(tmp_path):
    with pytest.raises(GpusplitError):
        write_files(str(tmp_path), {"good": "x", "bad": {"content": "y", "mode": True}})
    assert list(tmp_path.iterdir()) == []


def test_a_folder_or_link_in_place_of_a_file_is_refused_before_writing(tmp_path):
    (tmp_path / "plan.json").mkdir()
    with pytest.raises(GpusplitError, match="plan.json: exists and is not a regular file"):
        write_files(str(tmp_path), {"a": "x", "plan.json": "{}"})
    assert not (tmp_path / "a").exists()


def test_a_file_in_place_of_the_folder_is_refused(tmp_path):
    (tmp_path / "out").write_text("")
    with pytest.raises(GpusplitError, match=r"dir: .*/out exists and is not a folder"):
        write_files(str(tmp_path / "out"), {"a": "x"})


def test_modes_parse_as_octal_strings_or_integers():
    assert (
        parse_mode("0644", "m") == 0o644
        and parse_mode("755", "m") == 0o755
        and parse_mode(0o600, "m") == 0o600
    )
    with pytest.raises(GpusplitError, match="expected an octal mode such as '0644', got boolean"):
        parse_mode(True, "m")


def test_check_files_gives_the_absolute_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert check_files("out", {"a": "x"}) == (str(tmp_path / "out"), [("a", "x", 0o644)])
