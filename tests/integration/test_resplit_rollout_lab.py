"""playbooks/resplit.yml on the lab: batches, verified one after the other, stopped at the first bad one.

Five lab hosts in the order ws, hgx-lost, dgx, h200, ssh with gpusplit_rollout_batch=2: the batches
are [ws, hgx-lost], [dgx, h200], [ssh]. lab-h200-01 is given another machine's GPU facts (the
workstation fixture), so its split plugin is told UUIDs its node does not have: the node advertises
no GPU and does not verify. The rollout must stop after the second batch; lab-ssh-01, whose split
the same inventory changes, keeps its old one.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ansible_output import ansible_playbook, inventory_copy, recap

from lab import components as C

ROOT = Path(__file__).resolve().parents[2]
INVENTORY = ROOT / "inventory" / "lab"
PLUGIN_SELECTOR = "app.kubernetes.io/managed-by=gpusplit,app.kubernetes.io/name=gpusplit-device-plugin"
ORDER = ["lab-ws-01", "lab-hgx-lost-01", "lab-dgx-01", "lab-h200-01", "lab-ssh-01", "lab-a100-01"]
HOSTS = ("-e", "gpusplit_hosts=gpu_nodes:!lab-a100-01")

pytestmark = pytest.mark.integration


def daemonsets(kubectl) -> dict[str, dict]:
    items = kubectl.json("get", "daemonsets", "-A", "-l", PLUGIN_SELECTOR)["items"]
    return {d["metadata"]["annotations"]["gpusplit.io/node-name"]: d for d in items}


def visible(ds: dict) -> str:
    [container] = ds["spec"]["template"]["spec"]["containers"]
    return next(e["value"] for e in container["env"] if e["name"] == "NVIDIA_VISIBLE_DEVICES")


def rollout_inventory(tmp_path: Path) -> Path:
    def edit(hosts):
        hosts["lab-dgx-01"]["gpusplit_split"] = {"host_count": 3}  # batch 2: applied
        hosts["lab-h200-01"]["gpusplit_lab_fixture"] = "workstation"  # batch 2: will not verify
        hosts["lab-ssh-01"]["gpusplit_split"] = {"host_count": 0}  # batch 3: never reached

    return inventory_copy(tmp_path, edit, order=ORDER)


@pytest.fixture
def lab_as_inventory(lab):
    proc = ansible_playbook("site.yml", INVENTORY)
    assert proc.returncode == 0, proc.stdout[-4000:]
    yield
    proc = ansible_playbook("site.yml", INVENTORY)
    assert proc.returncode == 0, proc.stdout[-4000:]


def test_a_host_process_on_a_gpu_going_to_kubernetes_stops_the_batch(lab_as_inventory, tmp_path):
    proc = ansible_playbook(
        "resplit.yml",
        rollout_inventory(tmp_path),
        *HOSTS,
        "-e",
        "gpusplit_rollout_batch=2",
        "-e",
        "gpusplit_resplit_host_processes=refuse",  # the lab inventory lets the fixtures' frozen processes through
    )
    assert proc.returncode != 0
    said = " ".join(proc.stdout.split())
    assert (
        "The rollout stopped in the batch lab-dgx-01, lab-h200-01: lab-h200-01: host process(es) run on GPUs"
        in said
    )
    assert (
        "pid 2990 (/usr/local/bin/ollama) on GPU 0" in said and "Nothing was changed. Done before it" in said
    )
    assert "resume with --limit lab-dgx-01,lab-h200-01,lab-ssh-01" in said


def test_a_bad_batch_size_is_refused_before_anything(lab):
    proc = ansible_playbook("resplit.yml", INVENTORY, "-e", "gpusplit_rollout_batch=0")
    assert proc.returncode != 0
    assert "gpusplit_rollout_batch: '0' is neither a whole number >= 1 nor a percentage" in proc.stdout
    assert "Discover the batch" not in proc.stdout


def test_the_rollout_stops_after_the_batch_that_does_not_verify(lab_as_inventory, kubectl, tmp_path):
    before = daemonsets(kubectl)
    proc = ansible_playbook(
        "resplit.yml",
        rollout_inventory(tmp_path),
        *HOSTS,
        "-e",
        "gpusplit_rollout_batch=2",
        "-e",
        "gpusplit_verify_wait_seconds=4",
    )
    assert proc.returncode != 0, proc.stdout[-4000:]
    out = proc.stdout
    assert "The rollout stopped in the batch lab-dgx-01, lab-h200-01" in out, out[-5000:]
    assert "Done before it: lab-ws-01, lab-hgx-lost-01" in out
    assert "Not touched: lab-ssh-01" in out
    assert "lab-ssh-01" not in recap(out)  # never reached
    after = daemonsets(kubectl)
    # batch 2 was applied: lab-dgx-01 lost one more GPU to the host
    assert len(visible(after["lab-dgx-01"]).split(",")) == 5
    assert len(visible(before["lab-dgx-01"]).split(",")) == 6
    # batch 3 untouched: lab-ssh-01 keeps its old split plugin
    assert after["lab-ssh-01"]["metadata"]["generation"] == before["lab-ssh-01"]["metadata"]["generation"]
    assert visible(after["lab-ssh-01"]) == visible(before["lab-ssh-01"])
    report = json.loads((C.OUT / "fleet-report.json").read_text())
    verdicts = {n["name"]: n["verdict"] for n in report["nodes"]}
    assert verdicts["lab-h200-01"] == "FAIL" and verdicts["lab-dgx-01"] == "OK"
