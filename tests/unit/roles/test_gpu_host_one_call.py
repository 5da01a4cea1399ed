"""The role gpu_host costs one module execution per host: everything else runs on the controller.

Three local hosts (scratch roots, one with the toolkit's config.toml, one with a service and a
stale drop-in, one in mode none), the role run through ansible-playbook with the fleet bench's
counting callback (tools/bench_fleet.py). A first run, an unchanged re-run and a check-mode run:
every time each host runs exactly one task that executes a module on it, gpusplit.k8s.gpu_host_files.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
BIN = Path(sys.executable).parent
COLLECTION_LINK = ROOT / ".collections" / "ansible_collections" / "gpusplit" / "k8s"
TOOLKIT_FIXTURE = ROOT / "tests" / "fixtures" / "nvidia-container-toolkit" / "config.toml"
MARKER = "# Managed by gpusplit (gpusplit.k8s.gpu_host)."
HOST_SIDE = "gpusplit.k8s.gpu_host : Check and write the host side of the split (toolkit keys, host-gpus.env, drop-ins, stale drop-ins)"
FACTS = [
    {
        "index": 0,
        "minor_number": 0,
        "uuid": "GPU-d17388da-cce8-eb28-c8fa-9f8f1d69497d",
        "pci_bus_id": "00000000:18:00.0",
    },
    {
        "index": 1,
        "minor_number": 1,
        "uuid": "GPU-e19fbd40-cad5-96c4-25fd-6c41471faa42",
        "pci_bus_id": "00000000:2A:00.0",
    },
    {
        "index": 2,
        "minor_number": 2,
        "uuid": "GPU-006eea3e-5529-2fb7-f170-bc1c26dda554",
        "pci_bus_id": "00000000:3A:00.0",
    },
]
HOSTS = {
    "hardened": {"mode": "device_plugin", "services": []},
    "services": {"mode": "device_plugin", "services": ["trainer.service"]},
    "untouched": {"mode": "none", "services": []},
}
PLAYBOOK = """
- hosts: all
  gather_facts: false
  tasks:
    - name: Apply gpu_host
      ansible.builtin.include_role:
        name: gpusplit.k8s.gpu_host
      vars:
        gpusplit_node_plan: >-
          {{ facts | gpusplit.k8s.node_plan(inventory_hostname, mode, {'host_count': 1} if mode != 'none' else none) }}
        gpusplit_plugin_settings: {hardening: volume-mounts}
"""


def load_callback():
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import bench_fleet
    finally:
        sys.path.remove(str(ROOT / "tools"))
    return bench_fleet.CALLBACK


@pytest.fixture
def play(tmp_path):
    if not COLLECTION_LINK.exists():
        pytest.skip("run `make venv` first (collection link)")
    hosts = {}
    for name, spec in HOSTS.items():
        root = tmp_path / "roots" / name
        (root / "etc" / "systemd" / "system").mkdir(parents=True)
        if name == "hardened":
            (root / "etc" / "nvidia-container-runtime").mkdir(parents=True)
            (root / "etc" / "nvidia-container-runtime" / "config.toml").write_text(
                TOOLKIT_FIXTURE.read_text()
            )
        if name == "services":
            stale = root / "etc" / "systemd" / "system" / "old.service.d" / "50-gpusplit.conf"
            stale.parent.mkdir()
            stale.write_text(MARKER + "\n[Service]\n")
        hosts[name] = {
            "ansible_connection": "local",
            "ansible_python_interpreter": sys.executable,
            "gpusplit_host_root": str(root),
            "gpusplit_host_services": spec["services"],
            "mode": spec["mode"],
            "facts": FACTS,
        }
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    (tmp_path / "play.yml").write_text(PLAYBOOK)
    (tmp_path / "callbacks").mkdir()
    (tmp_path / "callbacks" / "gpusplit_bench_count.py").write_text(load_callback())

    def run(*extra):
        counts = tmp_path / "counts.json"
        env = dict(os.environ)
        env.update(
            ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
            ANSIBLE_CALLBACK_PLUGINS=str(tmp_path / "callbacks"),
            ANSIBLE_CALLBACKS_ENABLED="gpusplit_bench_count",
            GPUSPLIT_BENCH_COUNT_FILE=str(counts),
            ANSIBLE_NOCOLOR="1",
        )
        out = subprocess.run(
            [
                str(BIN / "ansible-playbook"),
                "-i",
                str(tmp_path / "hosts.yml"),
                str(tmp_path / "play.yml"),
                *extra,
            ],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert out.returncode == 0, out.stdout[-8000:] + out.stderr[-4000:]
        return json.loads(counts.read_text()), out.stdout

    return run, tmp_path


def test_one_host_side_module_call_per_host_on_every_run(play):
    run, tmp_path = play
    task = HOST_SIDE
    for args, changed in (((), True), ((), False), (("--check", "--diff"), False)):
        counts, stdout = run(*args)
        assert counts["host_side"] == dict.fromkeys(HOSTS, 1), (args, counts)
        assert counts["by_task"] == {task: len(HOSTS)}, (args, counts)
        assert counts.get("delegated", {}) == {}
        total_changed = sum(s["changed"] for s in counts["stats"].values())
        assert (total_changed > 0) is changed, (args, counts["stats"])
    roots = tmp_path / "roots"
    # the first run did the work: hardened toolkit, drop-in written, stale one removed, mode none untouched
    hardened = (roots / "hardened" / "etc" / "nvidia-container-runtime" / "config.toml").read_text()
    assert "\naccept-nvidia-visible-devices-envvar-when-unprivileged = false" in hardened
    systemd = roots / "services" / "etc" / "systemd" / "system"
    assert (systemd / "trainer.service.d" / "50-gpusplit.conf").read_text().startswith(MARKER)
    assert not (systemd / "old.service.d" / "50-gpusplit.conf").exists()
    for name in HOSTS:
        assert (roots / name / "etc" / "gpusplit" / "host-gpus.env").read_text().startswith(MARKER)
    assert not (roots / "untouched" / "etc" / "nvidia-container-runtime").exists()


# the discovery's reading of what the last run left (role gpu_discovery: nvidia_gpu_facts with
# host_state_path, registered as gpu_discovery_result), then the role
READ_RECORD = """
    - name: Read back what the last run left (as the discovery does)
      gpusplit.k8s.nvidia_gpu_facts:
        host_state_path: "{{ gpusplit_host_root }}/etc/gpusplit/host-state.json"
      environment:
        PATH: /usr/bin:/bin
      register: gpu_discovery_result
"""
PLAYBOOK_WITH_RECORD = PLAYBOOK.replace("  tasks:\n", "  tasks:" + READ_RECORD, 1)


def host_side_runs(counts):
    return counts["by_task"].get(HOST_SIDE, 0)


def test_an_unchanged_host_skips_the_host_side_and_a_hand_edit_brings_it_back(play):
    run, tmp_path = play
    (tmp_path / "play.yml").write_text(PLAYBOOK_WITH_RECORD)
    roots = tmp_path / "roots"
    counts, _ = run()
    assert host_side_runs(counts) == len(HOSTS)
    for name in HOSTS:
        record = json.loads((roots / name / "etc" / "gpusplit" / "host-state.json").read_text())
        assert str(roots / name / "etc" / "gpusplit" / "host-gpus.env") in record["files"]
    # unchanged: each host costs the discovery's module call only, in check mode too
    for args in ((), ("--check", "--diff")):
        counts, stdout = run(*args)
        assert host_side_runs(counts) == 0, (args, counts)
        assert counts["host_side"] == dict.fromkeys(HOSTS, 1)
        assert sum(s["changed"] for s in counts["stats"].values()) == 0
        assert "3 host(s) left as they are" in stdout
    # a drop-in edited by hand, a toolkit key put back and a gpusplit drop-in written by hand for
    # another unit: only those hosts run the host side again, and it puts everything back
    dropin = roots / "services" / "etc" / "systemd" / "system" / "trainer.service.d" / "50-gpusplit.conf"
    dropin.write_text(dropin.read_text() + "Environment=CUDA_VISIBLE_DEVICES=all\n")
    config = roots / "hardened" / "etc" / "nvidia-container-runtime" / "config.toml"
    config.write_text(
        config.read_text().replace("envvar-when-unprivileged = false", "envvar-when-unprivileged = true")
    )
    stray = roots / "untouched" / "etc" / "systemd" / "system" / "web.service.d" / "50-gpusplit.conf"
    stray.parent.mkdir(parents=True)
    stray.write_text(MARKER + "\n[Service]\n")
    counts, _ = run()
    assert host_side_runs(counts) == 3
    assert "CUDA_VISIBLE_DEVICES=all" not in dropin.read_text()
    assert "envvar-when-unprivileged = false" in config.read_text()
    assert not stray.exists()
    counts, _ = run()
    assert host_side_runs(counts) == 0
    # a changed inventory (another host service) changes the digest: that host runs it
    hosts = yaml.safe_load((tmp_path / "hosts.yml").read_text())
    hosts["all"]["hosts"]["untouched"]["gpusplit_host_services"] = ["web.service"]
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(hosts))
    counts, _ = run()
    assert counts["by_task"][HOST_SIDE] == 1
    assert stray.read_text().startswith(MARKER)


# split.yml's way: the entry point fleet once on the controller, then split.yml's own host play
# (entry point apply, imported statically, no argument spec): each pending host goes through one task,
# the module; the fleet's two run_once tasks (take the runs, say what happened) run once in all.
FLEET_PLAN = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: Plan the fleet (every host's node plan)
      ansible.builtin.set_fact:
        gpusplit_fleet_plan:
          nodes: >-
            {%- set ns = namespace(nodes={}) -%}
            {%- for host in groups['all'] -%}
            {%- set hv = hostvars[host] -%}
            {%- set ns.nodes = ns.nodes | combine({host: hv.facts | gpusplit.k8s.node_plan(host, hv.mode,
                  {'host_count': 1} if hv.mode != 'none' else none)}) -%}
            {%- endfor -%}
            {{ ns.nodes }}
"""
SPLIT_PLAYS = ("Work out the host side of every GPU host", "Apply the host side of the split")


def split_playbook():
    plays = {p.get("name"): p for p in yaml.safe_load((ROOT / "playbooks" / "split.yml").read_text())}
    return FLEET_PLAN + yaml.safe_dump([plays[name] for name in SPLIT_PLAYS], sort_keys=False)


def test_split_ymls_host_play_costs_each_pending_host_one_task(play):
    run, tmp_path = play
    (tmp_path / "play.yml").write_text(split_playbook())
    hosts = yaml.safe_load((tmp_path / "hosts.yml").read_text())
    for hv in hosts["all"]["hosts"].values():
        hv["gpusplit_plugin_settings"] = {"hardening": "volume-mounts"}
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(hosts))
    roots = tmp_path / "roots"
    for args, changed in (((), True), ((), False), (("--check", "--diff"), False)):
        counts, stdout = run(*args)
        assert counts["host_side"] == dict.fromkeys(HOSTS, 1), (args, counts)
        assert counts["by_task"] == {HOST_SIDE: len(HOSTS)}, (args, counts)
        # every task result of the GPU hosts: one each, plus the two run_once tasks of the fleet
        # (no argument-spec check, no render, no include, no systemd task per host)
        results = {
            h: s["ok"] + s["skipped"] + s["failures"] for h, s in counts["stats"].items() if h in HOSTS
        }
        assert sum(results.values()) == len(HOSTS) + 2, (args, counts["stats"])
        assert sorted(results.values()) == [1, 1, 3], (args, counts["stats"])
        assert "Validating arguments against arg spec 'main'" not in stdout
        assert "Validating arguments against arg spec 'fleet'" in stdout  # once, on the controller
        assert (sum(s["changed"] for h, s in counts["stats"].items() if h in HOSTS) > 0) is changed
        # the fleet's message reads each host's run from the fleet's result
        assert "services: node services (mode device_plugin)" in stdout, stdout
        if changed:
            assert "services: restart trainer.service to apply the host share" in stdout
    systemd = roots / "services" / "etc" / "systemd" / "system"
    assert (systemd / "trainer.service.d" / "50-gpusplit.conf").read_text().startswith(MARKER)
    assert not (systemd / "old.service.d" / "50-gpusplit.conf").exists()
    hardened = (roots / "hardened" / "etc" / "nvidia-container-runtime" / "config.toml").read_text()
    assert "\naccept-nvidia-visible-devices-envvar-when-unprivileged = false" in hardened
