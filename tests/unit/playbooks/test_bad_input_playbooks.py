"""The playbooks' own handling of bad input, run with ansible-playbook against no cluster (issue 18):
guard.yml's lint given a string, a glob that matches nothing or broken YAML (cases 1 and 14), and a
refused plan that leaves no earlier plan behind (case 6)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]
PYTHON_TEXT = (
    "CapturedExceptionMarker",
    "object has no attribute",
    "not iterable",
    "_AnsibleTagged",
    "Traceback",
)
FINDING = (
    "apiVersion: v1\nkind: Pod\nmetadata: {name: grab, namespace: team-a}\n"
    "spec:\n  containers:\n  - name: main\n    image: registry.example/x:1\n"
    "    env: [{name: NVIDIA_VISIBLE_DEVICES, value: all}]\n"
)


def playbook(path, *args, cwd, inventory="localhost,"):
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_COLLECTIONS_PATH": os.environ["ANSIBLE_COLLECTIONS_PATH"],
    }
    proc = subprocess.run(
        [
            str(Path(sys.executable).parent / "ansible-playbook"),
            "-i",
            str(inventory),
            "-c",
            "local",
            str(path),
            *args,
            "-e",
            f"ansible_python_interpreter={sys.executable}",
        ],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=300,
    )
    return proc.returncode, proc.stdout + proc.stderr


def test_guard_lint_reads_a_string_path_as_one_file(tmp_path):
    """Case 1: -e gpusplit_lint_paths=bad.yaml reads bad.yaml (relative to the working directory),
    finds the error and stops before the admission guard is installed; the severities to fail on
    may be given the same way (error,warning)."""
    (tmp_path / "bad.yaml").write_text(FINDING)
    rc, out = playbook(
        ROOT / "playbooks" / "guard.yml",
        "-e",
        "gpusplit_lint_paths=bad.yaml gpusplit_lint_fail_on=error,warning",
        cwd=tmp_path,
    )
    assert rc != 0, out
    assert "read 1 object(s)" in out
    assert "visible-devices-env: container main sets NVIDIA_VISIBLE_DEVICES in namespace team-a" in out
    assert "1 finding(s) of severity error/warning" in out
    assert "admission_guard" not in out  # the role never ran


def test_guard_lint_refuses_a_glob_that_matches_nothing_and_broken_yaml(tmp_path):
    """Case 1 (a glob naming nothing) and case 14 (a broken file): refused by name, nothing installed."""
    (tmp_path / "broken.yaml").write_text("kind: Pod\nmetadata: [\n")
    paths = json.dumps({"gpusplit_lint_paths": ["deploy/*.yaml", "broken.yaml"]})
    rc, out = playbook(ROOT / "playbooks" / "guard.yml", "-e", paths, cwd=tmp_path)
    assert rc != 0, out
    assert "gpusplit workload manifests refused:" in out
    assert "- gpusplit_lint_paths[0]: 'deploy/*.yaml': matches no file" in out
    assert "- broken.yaml: not valid YAML: line 3, column 1: while parsing a flow node" in out
    assert not any(text in out for text in PYTHON_TEXT), out
    assert "admission_guard" not in out


def test_a_refused_plan_removes_the_earlier_plan_and_report(tmp_path):
    """Case 6 and case 12 through the role: gpusplit_split: [count, 2] is refused naming the host and
    the field, and out/ keeps no plan, report or picture of an earlier run."""
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    for name in ("gpus.json", "fleet-plan.json", "fleet-report.json", "fleet.svg"):
        (out_dir / name).write_text("{}\n")
    inventory = tmp_path / "hosts.yml"
    host_vars = {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "gpusplit_mode": "device_plugin",
        "gpusplit_split": ["count", 2],
        "nvidia_gpus": [],
    }
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"gpu-a": host_vars}}}))
    play = tmp_path / "plan.yml"
    play.write_text(
        yaml.safe_dump(
            [
                {
                    "name": "a refused plan",
                    "hosts": "all",
                    "gather_facts": False,
                    "vars": {"gpusplit_out_dir": str(out_dir)},
                    "roles": [{"role": "gpusplit.k8s.gpu_plan"}],
                }
            ]
        )
    )
    rc, out = playbook(play, cwd=tmp_path, inventory=inventory)
    assert rc != 0, out
    assert "gpu-a: split (gpusplit_split): expected a mapping of one selector to its value" in out
    assert "got list ['count', 2]" in out
    assert not any(text in out for text in PYTHON_TEXT), out
    assert sorted(p.name for p in out_dir.iterdir()) == ["gpus.json"]


def test_plan_refuses_a_host_pattern_that_matches_no_host(tmp_path):
    """The sibling of case 1 in plan.yml: a pattern naming no host would skip every play and pass."""
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"gpu_nodes": {"hosts": {"gpu-a": {"ansible_connection": "local"}}}}))
    out_dir = tmp_path / "out"
    rc, out = playbook(
        ROOT / "playbooks" / "plan.yml",
        "-e",
        json.dumps({"gpusplit_hosts": "gpu_nodez", "gpusplit_out_dir": str(out_dir)}),
        cwd=tmp_path,
        inventory=inventory,
    )
    assert rc != 0, out
    assert 'gpusplit_hosts: "gpu_nodez" matches no host of the inventory' in out
    assert not out_dir.exists()
