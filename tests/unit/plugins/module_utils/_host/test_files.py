"""Reading, backing up and writing a host file (plugins/module_utils/_host/files.py)."""

from __future__ import annotations

import os
import stat

import pytest

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError
from ansible_collections.gpusplit.k8s.plugins.module_utils._host.files import (
    file_diff,
    is_inside,
    os_reason,
    read_text,
    write_atomic,
)
from ansible_collections.gpusplit.k8s.tests.unit.host_module import ansible_module


def test_is_inside_resolves_links_and_wants_a_whole_path_component(tmp_path):
    (tmp_path / "manifests").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "manifests")
    assert is_inside(tmp_path / "manifests", tmp_path / "manifests")
    assert is_inside(str(tmp_path / "link" / "backup"), str(tmp_path / "manifests"))
    assert not is_inside(str(tmp_path / "manifests-backup"), str(tmp_path / "manifests"))


def test_file_diff_heads_both_sides_with_the_path_unless_told():
    assert file_diff("a", "b", "/p") == {
        "before": "a",
        "after": "b",
        "before_header": "/p",
        "after_header": "/p",
    }
    assert file_diff("", "b", "(absent)", "/p")["after_header"] == "/p"


def test_write_atomic_gives_a_new_file_its_mode_and_keeps_an_old_ones(tmp_path):
    new = tmp_path / "new.yaml"
    write_atomic(ansible_module(), str(new), "a: 1\n", new_file=True, mode=0o600)
    assert new.read_text() == "a: 1\n" and stat.S_IMODE(new.stat().st_mode) == 0o600
    default = tmp_path / "default.yaml"
    write_atomic(ansible_module(), str(default), "b\n", new_file=True)
    assert stat.S_IMODE(default.stat().st_mode) == 0o644
    old = tmp_path / "old.yaml"
    old.write_text("x")
    old.chmod(0o640)
    write_atomic(ansible_module(), str(old), "y", mode=0o600)  # not a new file: mode ignored
    assert old.read_text() == "y" and stat.S_IMODE(old.stat().st_mode) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["default.yaml", "new.yaml", "old.yaml"]


def test_read_text_refuses_what_is_no_utf8_file(tmp_path):
    with pytest.raises(GpusplitError, match="is not a regular file"):
        read_text(str(tmp_path))
    bad = tmp_path / "bad"
    bad.write_bytes(b"\xff\xfe")
    with pytest.raises(GpusplitError, match="the config is not UTF-8 text"):
        read_text(str(bad), "the config")


class ReadError(GpusplitError):
    pass


def test_read_text_is_the_one_reader_and_names_what_to_fix(tmp_path):
    """One reader for the host modules, the control-plane modules and the manifest lint: the byte,
    line and column of a non-UTF-8 file, the operating system's words, the caller's error class;
    never Python's own text ("'utf-8' codec can't decode ...")."""
    bad = tmp_path / "kube-apiserver.yaml"
    bad.write_bytes(b"kind: Pod\nname: caf\xe9\r\n")
    with pytest.raises(ReadError) as caught:
        read_text(str(bad), "the manifest", error=ReadError)
    assert caught.value.errors == [
        "the manifest is not UTF-8 text: byte 0xe9 on line 2, column 10 is no UTF-8 character; "
        "save the file as UTF-8"
    ]
    with pytest.raises(ReadError) as caught:
        read_text(str(tmp_path / "gone.yaml"), error=ReadError)
    assert caught.value.errors == [f"cannot read {tmp_path / 'gone.yaml'}: No such file or directory"]
    with pytest.raises(ReadError, match=f"^{tmp_path} is not a regular file$"):
        read_text(str(tmp_path), error=ReadError)
    good = tmp_path / "crlf.yaml"
    good.write_bytes("a: ü\r\nb\n".encode())
    assert read_text(str(good)) == "a: ü\r\nb\n"  # line endings as they are


def test_the_control_plane_reads_with_the_same_reader():
    from ansible_collections.gpusplit.k8s.plugins.module_utils._control_plane import (
        health,
        module_io,
        yaml_text,
    )

    assert health.read_text is read_text
    assert not hasattr(module_io, "read_file") and not hasattr(yaml_text, "read_utf8")


def test_a_move_that_fails_is_an_oserror_with_the_systems_words(tmp_path):
    # ansible-core's atomic_move raises a plain Exception where its workaround did not help; write_atomic says
    # it as an OSError, so that a caller names the file instead of crashing
    (tmp_path / "dest").mkdir()  # a folder cannot be replaced by a file
    with pytest.raises(OSError) as caught:
        write_atomic(ansible_module(), str(tmp_path / "dest"), "text\n")
    assert os_reason(caught.value) == "Is a directory"
    assert sorted(os.listdir(tmp_path)) == ["dest"]  # no temporary file left
