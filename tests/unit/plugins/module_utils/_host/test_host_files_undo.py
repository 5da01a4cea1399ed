"""Taking gpusplit's host files back off a host (plugins/module_utils/_host/host_files_undo.py), after the module
gpu_host_files wrote them as the role gpu_host does."""

from __future__ import annotations

import json
import os
from types import SimpleNamespace

import pytest

from ansible_collections.gpusplit.k8s.plugins.module_utils._host import host_files_apply, host_files_undo

MARKER = "# Managed by gpusplit (gpusplit.k8s.gpu_host)."
ORIGINAL = (
    "#accept-nvidia-visible-devices-as-volume-mounts = false\n"
    "#accept-nvidia-visible-devices-envvar-when-unprivileged = true\n"
    'supported-driver-capabilities = "compat32,compute,utility"\n'
    '\n[nvidia-container-cli]\nldconfig = "@/sbin/ldconfig"\n'
)


class FakeModule:
    """What the two modules use of AnsibleModule here: atomic_move, warn."""

    def atomic_move(self, src, dest, **kwargs):
        os.replace(src, dest)

    def warn(self, text):
        raise AssertionError(text)


@pytest.fixture
def host(tmp_path):
    """A host after gpu_host_files: the toolkit hardened (a backup beside it), the env file, one drop-in, the record."""
    toolkit = tmp_path / "etc" / "nvidia-container-runtime" / "config.toml"
    toolkit.parent.mkdir(parents=True)
    toolkit.write_text(ORIGINAL)
    systemd = tmp_path / "etc" / "systemd" / "system"
    env = tmp_path / "etc" / "gpusplit" / "host-gpus.env"
    state = tmp_path / "etc" / "gpusplit" / "host-state.json"
    dropin = systemd / "ollama.service.d" / "50-gpusplit.conf"
    params = {
        "toolkit_path": str(toolkit),
        "toolkit_settings": dict(host_files_apply.HARDENING_SETTINGS),
        "toolkit_backup": True,
        "toolkit_refusal": None,
        "env_path": str(env),
        "env_content": "CUDA_VISIBLE_DEVICES=GPU-1\n",
        "dropins": [
            {"unit": "ollama.service", "path": str(dropin), "dir": str(dropin.parent), "content": None}
        ],
        "dropin_content": MARKER + "\n[Service]\nEnvironment=CUDA_VISIBLE_DEVICES=GPU-1\n",
        "dropin_dir": str(systemd),
        "dropin_name": "50-gpusplit.conf",
        "dropin_marker": MARKER,
        "state_path": str(state),
        "state_digest": "d1",
        "daemon_reload": False,
        "obsolete_dirs": [],
        "follow_links": False,
    }
    host_files_apply.execute(params, FakeModule())
    assert toolkit.read_text() != ORIGINAL
    undo = {
        "host_files": "restore",
        "state_path": str(state),
        "toolkit_path": str(toolkit),
        "toolkit_keys": sorted(host_files_undo.TOOLKIT_DEFAULTS),
        "env_path": str(env),
        "dropin_dir": str(systemd),
        "dropin_name": "50-gpusplit.conf",
        "dropin_marker": MARKER,
        "daemon_reload": False,
    }
    return SimpleNamespace(toolkit=toolkit, env=env, state=state, dropin=dropin, undo=undo, root=tmp_path)


def run(params, check=False):
    return host_files_undo.execute(params, FakeModule(), check_mode=check, diff=True)


def test_the_record_names_the_backup_of_the_first_edit(host):
    record = json.loads(host.state.read_text())
    [(path, backup)] = record["originals"].items()
    assert path == str(host.toolkit) and open(backup).read() == ORIGINAL


def test_restore_puts_the_original_back_byte_for_byte_and_removes_gpusplits_files(host):
    result = run(host.undo)
    assert host.toolkit.read_text() == ORIGINAL
    assert not host.env.exists() and not host.dropin.exists() and not host.state.exists()
    assert not host.dropin.parent.exists()  # the drop-in's folder, left empty
    assert not host.env.parent.exists()  # gpusplit's folder, left empty
    assert result["released_units"] == ["ollama.service"] and result["changed"]
    [toolkit] = [f for f in result["files"] if f["kind"] == "toolkit"]
    assert toolkit["action"] == "restore" and "the file is as gpusplit left it" in toolkit["note"]
    assert list(host.toolkit.parent.glob("config.toml.gpusplit-*.bak"))  # the backups stay


def test_a_second_run_changes_nothing(host):
    run(host.undo)
    again = run(host.undo)
    assert not again["changed"] and host.toolkit.read_text() == ORIGINAL


def test_check_mode_says_everything_and_changes_nothing(host):
    before = {p: p.read_text() for p in (host.toolkit, host.env, host.dropin, host.state)}
    result = run(host.undo, check=True)
    assert {p: p.read_text() for p in before} == before
    assert sorted(f["kind"] for f in result["files"] if f["changed"]) == [
        "dropin",
        "env",
        "record",
        "toolkit",
    ]
    assert all("diff" in f for f in result["files"] if f["changed"])


def test_a_file_edited_since_only_loses_gpusplits_keys_and_says_why(host):
    host.toolkit.write_text(host.toolkit.read_text() + '\n[nvidia-container-runtime]\nlog-level = "debug"\n')
    result = run(host.undo)
    text = host.toolkit.read_text()
    assert 'log-level = "debug"' in text  # the edit made since is kept
    assert "accept-nvidia-visible-devices-envvar-when-unprivileged = true" in text
    assert "accept-nvidia-visible-devices-as-volume-mounts = false" in text
    [toolkit] = [f for f in result["files"] if f["kind"] == "toolkit"]
    assert toolkit["action"] == "keys" and "the file changed since gpusplit wrote it" in toolkit["note"]
    assert not run(host.undo)["changed"]


def test_remove_never_replaces_the_file_whole(host):
    result = run({**host.undo, "host_files": "remove"})
    [toolkit] = [f for f in result["files"] if f["kind"] == "toolkit"]
    assert toolkit["action"] == "keys" and "gpusplit_unsplit_host_files=remove" in toolkit["note"]
    assert "accept-nvidia-visible-devices-envvar-when-unprivileged = true" in host.toolkit.read_text()


def test_keep_leaves_the_hardening_and_the_record(host):
    hardened = host.toolkit.read_text()
    result = run({**host.undo, "host_files": "keep"})
    assert host.toolkit.read_text() == hardened and host.state.exists()
    assert not host.env.exists() and not host.dropin.exists()
    [toolkit] = [f for f in result["files"] if f["kind"] == "toolkit"]
    assert toolkit["action"] == "keep" and "stays" in toolkit["note"]


def test_a_file_without_gpusplits_marker_is_never_removed(host):
    other = host.root / "etc" / "systemd" / "system" / "other.service.d" / "50-gpusplit.conf"
    other.parent.mkdir(parents=True)
    other.write_text("[Service]\nEnvironment=X=1\n")
    run(host.undo)
    assert other.exists()


def test_without_a_record_the_oldest_backup_gives_the_keys_values(host):
    host.state.unlink()
    result = run(host.undo)
    [toolkit] = [f for f in result["files"] if f["kind"] == "toolkit"]
    assert toolkit["action"] == "keys" and "no record of what gpusplit wrote there" in toolkit["note"]
    assert "envvar-when-unprivileged = true" in host.toolkit.read_text()


def test_no_toolkit_is_reported_missing(host):
    host.toolkit.unlink()
    result = run(host.undo)
    assert result["toolkit"] == {"path": str(host.toolkit), "missing": True}
