"""The lab's sshd_config (lab/sshd.py): sshd's check of the key files' folders is on unless the
checkout sits below a folder anyone may write, such as a clone in /tmp, where sshd would refuse
every key ("bad ownership or modes for directory /tmp")."""

from __future__ import annotations

import os
from pathlib import Path

from lab import sshd


def test_folders_others_may_write_are_found(tmp_path):
    private = tmp_path / "private" / "ssh"
    private.mkdir(parents=True)
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    (shared / "ssh").mkdir()
    assert str(shared) in sshd.writable_by_others(shared / "ssh")
    assert str(shared) not in sshd.writable_by_others(private)


def test_strict_modes_follow_the_checkouts_folders(monkeypatch):
    monkeypatch.setattr(sshd, "writable_by_others", lambda path: [])
    assert "StrictModes yes" in sshd.render_config().splitlines()
    monkeypatch.setattr(sshd, "writable_by_others", lambda path: ["/tmp"])
    assert "StrictModes no" in sshd.render_config().splitlines()


def test_the_check_is_made_where_the_keys_are(monkeypatch):
    seen = []
    monkeypatch.setattr(sshd, "writable_by_others", lambda path: seen.append(Path(path)) or [])
    sshd.render_config()
    assert seen == [sshd.AUTHORIZED_KEYS.parent]
