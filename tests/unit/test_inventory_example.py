"""inventory/example (the quick start's inventory, docs/quickstart.md) planned by playbooks/plan.yml.

Each GPU host is this machine over the local connection, its GPUs read through the fake NVML binding
from a GPU fixture (gpu-01: 8 x H100, gpu-02: 2 x L40S), the way the lab inventory reads them. The
plan must be what the quick start says: 6 + 1 GPUs to Kubernetes, 2 + 1 kept by the hosts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
INVENTORY = ROOT / "inventory" / "example"
FAKES = ROOT / "tests" / "fakes"
FIXTURES = ROOT / "tests" / "fixtures" / "gpus"
HOSTS = {"gpu-01.example.com": "dgx-h100", "gpu-02.example.com": "l40s-pair"}


def ansible(argv, timeout=240):
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    return done.returncode, done.stdout + done.stderr


def inventory_list(path):
    """``ansible-inventory --list`` of ``path``, read from stdout alone (a library's warning goes to stderr)."""
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    argv = [str(BIN / "ansible-inventory"), "-i", str(path), "--list"]
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def test_the_example_inventory_has_two_gpu_hosts_and_a_control_plane():
    inventory = inventory_list(INVENTORY)
    assert sorted(inventory["gpu_nodes"]["hosts"]) == sorted(HOSTS)
    assert inventory["control_plane"]["hosts"] == ["cp-01.example.com"]
    hostvars = inventory["_meta"]["hostvars"]
    assert all(hostvars[host]["gpusplit_mode"] == "device_plugin" for host in HOSTS)


def test_plan_yml_plans_the_example_inventory_from_fixture_gpus(tmp_path):
    out = tmp_path / "out"
    fixture = "{{ gpusplit_test_fixtures[inventory_hostname] }}"
    extra = {
        # every host is this machine, its GPUs the fixture's (tests/fakes: the fake NVML binding)
        "ansible_connection": "local",
        "ansible_become": False,
        "ansible_python_interpreter": sys.executable,
        "gpusplit_test_fixtures": {host: str(FIXTURES / f"{name}.json") for host, name in HOSTS.items()},
        "gpusplit_discovery_environment": {
            "PYTHONPATH": str(FAKES),
            "GPUSPLIT_FAKE_NVML_FIXTURE": fixture,
            "PATH": f"{FAKES / 'bin'}{os.pathsep}{os.environ['PATH']}",
        },
        "gpusplit_discovery_proc_root": str(ROOT / "tests" / "fixtures" / "proc"),
        "gpusplit_out_dir": str(out),
    }
    (tmp_path / "vars.json").write_text(json.dumps(extra))
    argv = [
        str(BIN / "ansible-playbook"),
        "-i",
        str(INVENTORY),
        str(ROOT / "playbooks" / "plan.yml"),
        "-e",
        f"@{tmp_path / 'vars.json'}",
    ]
    rc, output = ansible(argv)
    assert rc == 0, output
    plan = json.loads((out / "fleet-plan.json").read_text())
    nodes = plan["nodes"]
    assert sorted(nodes) == sorted(HOSTS)
    first, second = nodes["gpu-01.example.com"], nodes["gpu-02.example.com"]
    assert (len(first["host_uuids"]), len(first["kubernetes_uuids"])) == (2, 6)
    assert (len(second["host_uuids"]), len(second["kubernetes_uuids"])) == (1, 1)
    assert first["resources"] == {"nvidia.com/gpu": 6} and second["resources"] == {"nvidia.com/gpu": 1}
    assert (out / "gpus.json").is_file()
