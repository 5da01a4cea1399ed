"""Reading, backing up and writing a host file (plugins/module_utils/_host/files.py)."""

from __future__ import annotations

import os
import stat

import pytest

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError
from ansible_collections.gpusplit.k8s.plugins.module_utils._host import files
from ansible_collections.gpusplit.k8s.plugins.module_utils._host.files import (
    LinkRefused,
    backup_beside,
    backup_copy,
    file_diff,
    is_inside,
    os_reason,
    own_directory,
    read_text,
    write_atomic,
    write_with_backup,
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


# ---- issue 43: backups and links


def test_a_backup_keeps_content_mode_times_and_owner(tmp_path):
    source = tmp_path / "config.toml"
    source.write_text("a = 1\n")
    source.chmod(0o600)
    os.utime(source, (1_000_000, 1_000_000))
    if os.geteuid() == 0:
        os.chown(source, 1234, 4321)  # another user's file, backed up by root
    backup = backup_beside(str(source))
    info = os.stat(backup)
    assert open(backup).read() == "a = 1\n" and stat.S_IMODE(info.st_mode) == 0o600
    assert info.st_mtime == 1_000_000
    if os.geteuid() == 0:
        assert (info.st_uid, info.st_gid) == (1234, 4321)  # issue 43: it was root's
    assert sorted(os.listdir(tmp_path)) == sorted(["config.toml", os.path.basename(backup)])


@pytest.mark.parametrize("fail", ["copystat", "fsync"])
def test_a_backup_that_fails_leaves_nothing_under_its_name(tmp_path, monkeypatch, fail):
    """issue 43: the copy went straight to its final name, so that a full disk or a kill left a partial .bak."""
    source = tmp_path / "m.yaml"
    source.write_text("x" * 10000)

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(files.shutil if fail == "copystat" else files.os, fail, full)
    with pytest.raises(OSError, match="No space left"):
        backup_copy(str(source), str(tmp_path / "backups"))
    assert os.listdir(tmp_path / "backups") == []


def test_backup_copy_never_overwrites(tmp_path, monkeypatch):
    source = tmp_path / "m.yaml"
    source.write_text("new")
    monkeypatch.setattr(files.time, "strftime", lambda *a: "STAMP")
    first = backup_copy(str(source), str(tmp_path / "b"))
    source.write_text("newer")
    second = backup_copy(str(source), str(tmp_path / "b"))
    assert first != second and open(first).read() == "new" and open(second).read() == "newer"


def test_a_write_that_is_refused_takes_its_backup_back(tmp_path, monkeypatch):
    """issue 43: a refused write left a backup of a file that did not change."""
    path = tmp_path / "config.toml"
    path.write_text("old")

    def refuse(module, src, dest):
        raise OSError(30, "Read-only file system", dest)

    monkeypatch.setattr(files, "move", refuse)
    for where in ("beside", str(tmp_path / "backups")):
        with pytest.raises(OSError, match="Read-only"):
            write_with_backup(ansible_module(), str(path), "new", where)
        assert path.read_text() == "old"
        assert sorted(os.listdir(tmp_path)) == (
            ["backups", "config.toml"] if where != "beside" else ["config.toml"]
        )
    assert os.listdir(tmp_path / "backups") == []


def test_a_link_is_not_written_through_unless_followed(tmp_path):
    """issue 43: write_atomic followed links, changing another file, and a new mode came with it."""
    target = tmp_path / "elsewhere" / "host-gpus.env"
    target.parent.mkdir()
    target.write_text("old")
    target.chmod(0o600)
    link = tmp_path / "host-gpus.env"
    link.symlink_to(target)
    with pytest.raises(
        LinkRefused, match=f"{link} is a symbolic link to {target}: refusing to write through it"
    ):
        write_atomic(ansible_module(), str(link), "new", option="follow_links")
    with pytest.raises(LinkRefused, match="set follow_links: true"):
        write_with_backup(ansible_module(), str(link), "new", "beside", option="follow_links")
    assert target.read_text() == "old" and sorted(os.listdir(tmp_path)) == ["elsewhere", "host-gpus.env"]
    with pytest.raises(LinkRefused) as caught:
        write_atomic(ansible_module(), str(link), "new", option=None)
    assert "set " not in str(caught.value)
    backup = write_with_backup(ansible_module(), str(link), "new", "beside", follow=True)
    assert link.is_symlink() and target.read_text() == "new" and stat.S_IMODE(target.stat().st_mode) == 0o600
    assert os.path.dirname(backup) == str(tmp_path) and open(backup).read() == "old"


def test_own_directory_is_the_links_not_its_targets(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "kube-apiserver.yaml").write_text("x")
    (tmp_path / "manifests").mkdir()
    (tmp_path / "manifests" / "kube-apiserver.yaml").symlink_to(tmp_path / "real" / "kube-apiserver.yaml")
    assert own_directory(str(tmp_path / "manifests" / "kube-apiserver.yaml")) == str(tmp_path / "manifests")
