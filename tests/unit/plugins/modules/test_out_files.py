"""out_files as Ansible runs it: the module's main() with a real AnsibleModule, and its action plugin in a real
ansible-playbook run (on the controller, whatever the task's host: no connection, no module execution; check mode,
a task's check_mode: false, diff, an unchanged re-run, a refusal that writes nothing)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpusplit.k8s.plugins.modules import out_files

ROOT = Path(__file__).resolve().parents[4]
BIN = Path(sys.executable).parent


def run_module(args):
    out = io.StringIO()
    with patch_module_args(args), contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        out_files.main()
    return json.loads(out.getvalue())


def test_the_module_writes_where_it_runs_and_leaves_an_unchanged_file(tmp_path):
    out = tmp_path / "out"
    first = run_module({"dir": str(out), "files": {"gpus.json": "{}\n"}})
    assert (
        first["changed"] and first["written"] == ["gpus.json"] and (out / "gpus.json").read_text() == "{}\n"
    )
    again = run_module({"dir": str(out), "files": {"gpus.json": "{}\n"}})
    assert not again["changed"] and again["unchanged"] == ["gpus.json"]


def test_the_module_refuses_a_bad_name_by_name(tmp_path):
    result = run_module({"dir": str(tmp_path), "files": {"../x": "a"}})
    assert result["failed"] and not result["changed"]
    assert result["msg"] == "files['../x']: a file name without '/' is expected (the file is written in dir)"
    assert list(tmp_path.iterdir()) == []


def playbook(tmp_path, tasks, *extra):
    """One play on a host that cannot be reached (TEST-NET-1 over ssh): only a task that needs no
    connection can succeed there. Each task's result through the JSON callback."""
    (tmp_path / "inventory.yml").write_text(
        yaml.safe_dump(
            {
                "all": {
                    "hosts": {
                        "far": {
                            "ansible_connection": "ssh",
                            "ansible_host": "192.0.2.1",
                            "ansible_ssh_common_args": "-o ConnectTimeout=1",
                        }
                    }
                }
            }
        )
    )
    (tmp_path / "play.yml").write_text(
        yaml.safe_dump([{"hosts": "far", "gather_facts": False, "tasks": tasks}])
    )
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
        "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json",
        "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1",
    }
    proc = subprocess.run(
        [
            str(BIN / "ansible-playbook"),
            "-i",
            str(tmp_path / "inventory.yml"),
            str(tmp_path / "play.yml"),
            *extra,
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    doc = json.loads(proc.stdout)
    return [t["hosts"]["far"] for t in doc["plays"][0]["tasks"]], proc


def write(out, files, **keywords):
    return {"gpusplit.k8s.out_files": {"dir": str(out), "files": files}, "ignore_errors": True, **keywords}


def test_the_action_writes_on_the_controller_with_check_mode_diff_and_no_change_on_a_rerun(tmp_path):
    out = tmp_path / "out"
    report = '{"counts": {"OK": 2}}\n'
    tasks = [
        write(out, {"fleet-report.json": report, "fleet.svg": "<svg/>"}),  # --check: nothing written
        write(out, {"fleet-report.json": report, "fleet.svg": "<svg/>"}, check_mode=False),
        write(out, {"fleet-report.json": report, "fleet.svg": "<svg/>"}, check_mode=False),
        write(
            out,
            {"fleet-report.json": report, "fleet.svg": {"content": "<svg/>", "mode": "0600"}},
            check_mode=False,
        ),
        write(out, {"fleet.svg": "<svg/>", "../escape": "x"}, check_mode=False),
    ]
    results, proc = playbook(tmp_path, tasks, "--check", "--diff")
    checked, first, again, mode, refused = results
    assert checked["changed"] and checked["written"] == ["fleet-report.json", "fleet.svg"]
    assert checked["diff"][0]["after"] == report and checked["diff"][0]["before_header"].endswith("(absent)")
    assert first["changed"] and first["created_dir"] and first["dir"] == str(out)
    assert json.loads((out / "fleet-report.json").read_text()) == {"counts": {"OK": 2}}
    assert not again["changed"] and again["unchanged"] == ["fleet-report.json", "fleet.svg"]
    assert mode["written"] == ["fleet.svg"] and (out / "fleet.svg").stat().st_mode & 0o777 == 0o600
    assert refused["failed"] and "files['../escape']: a file name without '/'" in refused["msg"]
    assert not (tmp_path / "escape").exists()
    assert sorted(p.name for p in out.iterdir()) == ["fleet-report.json", "fleet.svg"]
    assert "UNREACHABLE" not in proc.stdout and not any(r.get("unreachable") for r in results)


def test_the_action_checks_its_options_like_the_module(tmp_path):
    (results, _proc) = playbook(
        tmp_path, [{"gpusplit.k8s.out_files": {"dir": str(tmp_path), "files": "text"}, "ignore_errors": True}]
    )
    assert results[0]["failed"] and "files" in results[0]["msg"] and "dict" in results[0]["msg"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["inventory.yml", "play.yml"]
