"""gpu_host_files as Ansible runs it: its documentation through ansible-doc, and main() with a real
AnsibleModule and a systemctl stand-in on PATH for the option daemon_reload (the reload runs in the
module's own call, after the files and their record are written; nothing runs in check mode)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpusplit.k8s.plugins.modules import gpu_host_files

ROOT = Path(__file__).resolve().parents[4]
SYSTEMCTL_STANDIN = ROOT / "tests" / "fakes" / "systemctl" / "systemctl"
BIN = Path(sys.executable).parent
MARKER = "# Managed by gpusplit (gpusplit.k8s.gpu_host)."
DROPIN = MARKER + "\n[Service]\nEnvironment=CUDA_VISIBLE_DEVICES=GPU-1\n"


def test_ansible_doc_renders_daemon_reload():
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
    proc = subprocess.run(
        [str(BIN / "ansible-doc"), "gpusplit.k8s.gpu_host_files"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "ERROR" not in out, out
    options = out[out.index("OPTIONS") : out.index("EXAMPLES:")]
    returned = out[out.index("RETURN VALUES:") :]
    assert "daemon_reload " in options and "default: false" in options
    assert "daemon_reloaded " in returned and "check mode" in returned
    assert "daemon_reload: true" in out[out.index("EXAMPLES:") : out.index("RETURN VALUES:")]


@pytest.fixture
def host(tmp_path, monkeypatch):
    """A scratch host root, the systemctl stand-in (tests/fakes/systemctl: logs its arguments, exits
    $STANDIN_RC, says $STANDIN_ERR) first on PATH."""
    log = tmp_path / "systemctl.log"
    script = SYSTEMCTL_STANDIN
    monkeypatch.setenv("PATH", f"{script.parent}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("STANDIN_LOG", str(log))
    monkeypatch.setenv("STANDIN_ERR", "reload refused")
    monkeypatch.delenv("STANDIN_RC", raising=False)
    root = tmp_path / "host"
    systemd = root / "etc" / "systemd" / "system"
    systemd.mkdir(parents=True)
    args = {
        "env_path": f"{root}/etc/gpusplit/host-gpus.env",
        "env_content": MARKER + "\nCUDA_VISIBLE_DEVICES=GPU-1\n",
        "dropins": [{"unit": "trainer.service", "path": f"{systemd}/trainer.service.d/50-gpusplit.conf"}],
        "dropin_content": DROPIN,
        "dropin_dir": str(systemd),
        "dropin_marker": MARKER,
        "state_path": f"{root}/etc/gpusplit/host-state.json",
        "state_digest": "digest-1",
        "daemon_reload": True,
    }
    return {"args": args, "root": root, "script": script, "log": log}


def run_main(args, capsys):
    with patch_module_args(args), pytest.raises(SystemExit) as exc:
        gpu_host_files.main()
    return exc.value.code, json.loads(capsys.readouterr().out)


def calls(host):
    return host["log"].read_text().splitlines() if host["log"].exists() else []


def test_the_module_reloads_systemd_when_a_drop_in_changed_and_only_then(host, capsys):
    rc, out = run_main(host["args"], capsys)
    assert rc == 0, out
    assert out["changed"] is True and out["dropins_changed"] is True and out["daemon_reloaded"] is True
    assert calls(host) == ["daemon-reload"]
    assert out["state"]["digest"] == "digest-1"
    rc, out = run_main(host["args"], capsys)
    assert rc == 0 and out["changed"] is False and out["daemon_reloaded"] is False
    assert calls(host) == ["daemon-reload"]


def test_check_mode_reloads_nothing_and_says_so(host, capsys):
    rc, out = run_main({**host["args"], "_ansible_check_mode": True, "_ansible_diff": True}, capsys)
    assert rc == 0, out
    assert out["changed"] is True and out["dropins_changed"] is True and out["daemon_reloaded"] is False
    assert calls(host) == []
    assert not (host["root"] / "etc" / "systemd" / "system" / "trainer.service.d").exists()


def test_daemon_reload_is_off_by_default(host, capsys):
    args = dict(host["args"])
    del args["daemon_reload"]
    rc, out = run_main(args, capsys)
    assert rc == 0 and out["dropins_changed"] is True and out["daemon_reloaded"] is False
    assert calls(host) == []


def test_a_failed_reload_fails_the_module_with_the_files_written(host, capsys, monkeypatch):
    monkeypatch.setenv("STANDIN_RC", "1")
    rc, out = run_main(host["args"], capsys)
    assert rc == 1 and out["failed"] is True
    assert out["msg"].startswith(f"`{host['script']} daemon-reload` failed (rc 1: reload refused)")
    assert "The files were already written" in out["msg"] and "gpusplit_systemd_reload: false" in out["msg"]
    # the result says what was written: the host changed
    assert out["changed"] is True and out["restart_units"] == ["trainer.service"]
    assert out["daemon_reloaded"] is False
    dropin = host["root"] / "etc" / "systemd" / "system" / "trainer.service.d" / "50-gpusplit.conf"
    assert dropin.read_text() == DROPIN


def test_no_systemctl_fails_before_anything_is_written(host, capsys, monkeypatch):
    # (AnsibleModule.get_bin_path also looks in the sbin folders, where this machine may have one)
    monkeypatch.setattr(AnsibleModule, "get_bin_path", lambda self, arg, required=False, opt_dirs=None: None)
    rc, out = run_main(host["args"], capsys)
    assert rc == 1 and out["changed"] is False
    assert "systemctl is not on this host" in out["msg"] and "Nothing was written" in out["msg"]
    assert not (host["root"] / "etc" / "gpusplit").exists()
    assert calls(host) == []
