"""The record of what gpu_host_files left on a host (plugins/module_utils/_host/host_files_record.py)."""

from __future__ import annotations

import json
import os

import pytest

from ansible_collections.gpusplit.k8s.plugins.module_utils._host import host_files_record

MARKER = "# Managed by gpusplit (gpusplit.k8s.gpu_host)."


@pytest.fixture
def host(tmp_path):
    systemd = tmp_path / "etc" / "systemd" / "system"
    (systemd / "a.service.d").mkdir(parents=True)
    dropin = systemd / "a.service.d" / "50-gpusplit.conf"
    dropin.write_text(MARKER + "\n")
    env = tmp_path / "etc" / "gpusplit" / "host-gpus.env"
    env.parent.mkdir(parents=True)
    env.write_text("CUDA_VISIBLE_DEVICES=0\n")
    scan = {"dir": str(systemd), "name": "50-gpusplit.conf", "marker": MARKER}
    state = str(tmp_path / "etc" / "gpusplit" / host_files_record.STATE_NAME)
    missing = str(tmp_path / "etc" / "nvidia-container-runtime" / "config.toml")
    host_files_record.record(state, "d1", [str(env), str(dropin), missing], scan=scan)
    return {"state": state, "env": env, "dropin": dropin, "systemd": systemd, "missing": missing}


def test_a_fresh_record_reads_back_intact(host):
    assert host_files_record.read_state(host["state"]) == {
        "path": host["state"],
        "digest": "d1",
        "intact": True,
        "differs": [],
    }
    record = json.loads(open(host["state"]).read())
    assert record["files"][host["missing"]] is None
    assert record["scan"]["found"] == [str(host["dropin"])]
    assert oct(os.stat(host["state"]).st_mode & 0o777) == "0o644"


def test_an_edited_file_is_named(host):
    host["env"].write_text("CUDA_VISIBLE_DEVICES=all\n")
    found = host_files_record.read_state(host["state"])
    assert found["intact"] is False and found["differs"] == [str(host["env"])]


def test_a_file_that_appears_or_goes_is_a_difference(host):
    os.makedirs(os.path.dirname(host["missing"]))
    with open(host["missing"], "w") as handle:
        handle.write("[nvidia-container-cli]\n")
    host["dropin"].unlink()
    found = host_files_record.read_state(host["state"])
    # the removed drop-in also changes what the scan of the folder finds
    assert found["differs"] == sorted([host["missing"], str(host["dropin"])]) + [str(host["systemd"])]


def test_a_gpusplit_drop_in_written_by_hand_is_a_difference(host):
    stray = host["systemd"] / "b.service.d" / "50-gpusplit.conf"
    stray.parent.mkdir()
    stray.write_text(MARKER + "\n")
    assert host_files_record.read_state(host["state"])["differs"] == [str(host["systemd"])]
    stray.write_text("# not ours\n")
    assert host_files_record.read_state(host["state"])["intact"] is True


@pytest.mark.parametrize("text", [None, "", "{", "[]", '{"format": 99, "files": {}}', '{"format": 1}'])
def test_no_readable_record_reads_as_none(tmp_path, text):
    path = tmp_path / "host-state.json"
    if text is not None:
        path.write_text(text)
    assert host_files_record.read_state(str(path)) is None


def test_a_record_that_cannot_be_written_says_where(tmp_path):
    blocker = tmp_path / "etc"
    blocker.write_text("a file where the folder should be")
    with pytest.raises(
        host_files_record.HostStateError, match=r"cannot record the applied state in .*host-state.json"
    ):
        host_files_record.record(str(blocker / "gpusplit" / "host-state.json"), "d", [])


@pytest.mark.parametrize("root", ["/", "/srv/lab/hosts/n1", "/srv/lab/hosts/n1/"])
def test_the_discovery_reads_the_record_where_the_host_side_writes_it(root):
    """gpu_discovery's default path (read before the plan) is the host share's state_path (written after)."""
    from pathlib import Path

    import jinja2
    import yaml

    from ansible_collections.gpusplit.k8s.plugins.plugin_utils import host_files_render

    defaults = Path(__file__).resolve().parents[5] / "roles" / "gpu_discovery" / "defaults" / "main.yml"
    template = yaml.safe_load(defaults.read_text())["gpusplit_host_state_path"]
    env = jinja2.Environment()
    read_at = env.from_string(template).render(gpusplit_host_root=root)
    written_at = host_files_render.posixpath.join(
        host_files_render.posixpath.normpath(root), host_files_render.ENV_DIR, host_files_record.STATE_NAME
    )
    assert read_at == written_at
