"""module_utils/_host/lean_host.py: the AnsibleModule methods a host module's work uses, from the standard
library. atomic_move is compared with ansible-core's own AnsibleModule.atomic_move on twin files (owner,
group, mode, extended attributes, a set-group-ID folder, the umask); the PATH search with get_bin_path's
order; the SELinux check with mount tables."""

from __future__ import annotations

import os
import stat
import sys

import pytest
from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import RunTheModule
from ansible_collections.gpusplit.k8s.plugins.module_utils._host import lean_host
from ansible_collections.gpusplit.k8s.plugins.module_utils._host.files import write_atomic
from ansible_collections.gpusplit.k8s.plugins.module_utils._host.lean_host import (
    LeanHost,
    atomic_move,
    find_executable,
    selinux_enabled,
)

ROOT_USER = os.geteuid() == 0
OTHER_ID = 4242  # an owner and group no account has, for the cases that need root


def ansible_module():
    with patch_module_args({}):
        return AnsibleModule(argument_spec={})


def xattrs_supported(path):
    try:
        os.setxattr(path, "user.gpusplit-probe", b"1")
        os.removexattr(path, "user.gpusplit-probe")
        return True
    except OSError:
        return False


def what_it_left(path):
    """What a move decides about a file: its owner, group, mode and extended attributes, and its content."""
    info = os.stat(path)
    return {
        "uid": info.st_uid,
        "gid": info.st_gid,
        "mode": oct(stat.S_IMODE(info.st_mode)),
        "xattrs": {name: os.getxattr(path, name) for name in sorted(os.listxattr(path))},
        "text": open(path).read(),
    }


def twin_moves(tmp_path, prepare, umask=0o022):
    """Move a new text over ``dest`` in two twin folders, by AnsibleModule.atomic_move and by the lean one;
    ``prepare(folder)`` builds each folder first. Returns (AnsibleModule's, lean's) what_it_left."""
    left = []
    for name, move in (("module", ansible_module().atomic_move), ("lean", atomic_move)):
        folder = tmp_path / name
        folder.mkdir()
        prepare(folder)
        src = folder / ".dest.new"
        src.write_text("new text\n")
        os.chmod(src, 0o600)  # (as mkstemp leaves it)
        old_mask = os.umask(umask)
        try:
            move(str(src), str(folder / "dest"))
        finally:
            os.umask(old_mask)
        assert not src.exists()
        left.append(what_it_left(folder / "dest"))
    return left


def existing(mode=0o640, uid=None, gid=None, xattr=None):
    def prepare(folder):
        dest = folder / "dest"
        dest.write_text("old text\n")
        os.chmod(dest, mode)
        if uid is not None:
            os.chown(dest, uid, gid)
        if xattr:
            os.setxattr(dest, *xattr)

    return prepare


@pytest.mark.parametrize("mode", [0o600, 0o640, 0o755, 0o444])
def test_an_existing_file_keeps_its_mode_as_with_ansiblemodule(mode, tmp_path):
    module, lean = twin_moves(tmp_path, existing(mode))
    assert lean == module
    assert lean["mode"] == oct(mode) and lean["text"] == "new text\n"


@pytest.mark.skipif(not ROOT_USER, reason="setting another owner needs root")
def test_an_existing_file_keeps_its_owner_and_group_as_with_ansiblemodule(tmp_path):
    module, lean = twin_moves(tmp_path, existing(0o600, OTHER_ID, OTHER_ID))
    assert lean == module
    assert (lean["uid"], lean["gid"]) == (OTHER_ID, OTHER_ID)


def test_an_existing_file_keeps_its_extended_attributes_as_with_ansiblemodule(tmp_path):
    if not xattrs_supported(tmp_path):
        pytest.skip("this file system has no user extended attributes")
    module, lean = twin_moves(tmp_path, existing(0o644, xattr=("user.gpusplit-test", b"kept")))
    assert lean == module
    assert lean["xattrs"]["user.gpusplit-test"] == b"kept"


@pytest.mark.parametrize("umask", [0o022, 0o027, 0o077])
def test_a_new_file_gets_the_umasks_mode_as_with_ansiblemodule(umask, tmp_path):
    module, lean = twin_moves(tmp_path, lambda folder: None, umask=umask)
    assert lean == module
    assert lean["mode"] == oct(0o666 & ~umask) and lean["uid"] == os.geteuid()


@pytest.mark.skipif(not ROOT_USER, reason="giving a folder another group needs root")
def test_a_new_file_in_a_set_group_id_folder_gets_the_folders_group_as_with_ansiblemodule(tmp_path):
    def prepare(folder):
        os.chown(folder, -1, OTHER_ID)
        os.chmod(folder, 0o2775)

    module, lean = twin_moves(tmp_path, prepare)
    assert lean == module
    assert lean["gid"] == OTHER_ID


def test_the_new_file_gets_the_time_of_the_move(tmp_path):
    dest = tmp_path / "dest"
    dest.write_text("old\n")
    os.utime(dest, (1_000_000, 1_000_000))
    src = tmp_path / ".dest.new"
    src.write_text("new\n")
    atomic_move(str(src), str(dest))
    assert os.stat(dest).st_mtime > 1_000_000


def test_a_failed_rename_is_an_oserror_and_leaves_the_old_file(tmp_path):
    dest = tmp_path / "dest"
    dest.mkdir()  # a folder cannot be replaced by a file
    src = tmp_path / ".dest.new"
    src.write_text("new\n")
    with pytest.raises(OSError):
        atomic_move(str(src), str(dest))
    assert dest.is_dir()


def test_write_atomic_through_the_lean_host_writes_as_through_ansiblemodule(tmp_path):
    for name, host in (("module", ansible_module()), ("lean", LeanHost())):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "kept.conf").write_text("old\n")
        os.chmod(folder / "kept.conf", 0o600)
        write_atomic(host, str(folder / "kept.conf"), "new\n")
        write_atomic(host, str(folder / "made.conf"), "made\n", new_file=True, mode=0o644)
    for file in ("kept.conf", "made.conf"):
        assert what_it_left(tmp_path / "lean" / file) == what_it_left(tmp_path / "module" / file)
    assert sorted(os.listdir(tmp_path / "lean")) == ["kept.conf", "made.conf"]  # no temporary file left


def executable(path, mode=0o755):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    os.chmod(path, mode)
    return str(path)


def test_find_executable_takes_the_first_in_path_and_skips_what_cannot_run(tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    executable(first / "tool", 0o644)  # not executable
    (first / "dir-tool").mkdir(parents=True)  # a folder
    wanted = executable(second / "tool")
    executable(second / "dir-tool")
    path = os.pathsep.join([str(first), "", str(second)])
    assert find_executable("tool", path) == wanted
    assert find_executable("dir-tool", path) == str(second / "dir-tool")
    assert find_executable("no-such-tool", path) is None


def test_find_executable_looks_in_the_sbin_folders_after_path_as_get_bin_path(tmp_path, monkeypatch):
    sbin = tmp_path / "sbin"
    found = executable(sbin / "gpusplit-tool")
    monkeypatch.setattr(lean_host, "SBIN_DIRS", (str(sbin),))
    assert find_executable("gpusplit-tool", str(tmp_path / "empty")) == found
    assert LeanHost().get_bin_path("gpusplit-tool") == found


def mounts(tmp_path, *types):
    table = tmp_path / "mounts"
    table.write_text(
        "".join(
            f"{kind} /mnt/{n} {kind} rw,relatime 0 0\n" for n, kind in enumerate(("proc", "sysfs") + types)
        )
    )
    return str(table)


def test_selinux_is_on_where_selinuxfs_is_mounted_or_the_table_cannot_be_read(tmp_path):
    assert selinux_enabled(mounts(tmp_path)) is False
    assert selinux_enabled(mounts(tmp_path, "selinuxfs")) is True
    assert selinux_enabled(str(tmp_path / "no-such-table")) is True
    # (a file system type, not a word anywhere in the line)
    (tmp_path / "named").write_text("tmpfs /mnt/selinuxfs tmpfs rw 0 0\n")
    assert selinux_enabled(str(tmp_path / "named")) is False


def test_ready_to_write_asks_for_the_module_only_where_selinux_is_on(tmp_path, monkeypatch):
    monkeypatch.setattr(lean_host, "MOUNTS", mounts(tmp_path))
    LeanHost().ready_to_write()
    monkeypatch.setattr(lean_host, "MOUNTS", mounts(tmp_path, "selinuxfs"))
    with pytest.raises(RunTheModule, match="SELinux is enabled on this host"):
        LeanHost().ready_to_write()


def test_run_command_answers_as_ansiblemodules_and_raises_where_the_program_cannot_start(tmp_path):
    args = [sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"]
    assert LeanHost().run_command(args) == ansible_module().run_command(args, handle_exceptions=False)
    assert LeanHost().run_command(args) == (3, "out\n", "err\n")
    with pytest.raises(OSError):
        LeanHost().run_command([str(tmp_path / "no-such-program")])


def test_warnings_are_kept_once_in_order():
    host = LeanHost()
    for text in ("a", "b", "a"):
        host.warn(text)
    assert host.warnings == ["a", "b"]
