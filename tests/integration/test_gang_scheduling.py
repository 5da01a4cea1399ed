"""Gang scheduling on the lab's real v1.37.2 kube-scheduler, with GenericWorkload enabled by the role.

Two kwok nodes of our own (label and taint of this run, so no other test's pod lands there) advertise
nvidia.com/gpu 2 + 1. A PodGroup (scheduling.k8s.io/v1beta1, gang minCount 4) with four one-GPU pods
(spec.schedulingGroup.podGroupName), rendered by gpusplit's workload renderer:

* with 3 GPUs free none of the four is scheduled: all stay Pending, and the scheduler says why
  ("minCount (4) cannot be satisfied");
* once a fourth GPU is free, all four are scheduled together;
* for contrast, the same four pods with policy basic on 3 free GPUs: three run, one is Pending with
  "Insufficient nvidia.com/gpu".

The lab's manifests are put back as they were found at the end.
"""

from __future__ import annotations

import json
import sys
import time
import uuid
from pathlib import Path

import pytest

from ansible_collections.gpusplit.k8s.plugins.plugin_utils import gang_job_render as workload
from lab import components as C
from lab import lab as labctl
from lab import nodes as labnodes
from lab.gates import enable_generic_workload

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
GPU = "nvidia.com/gpu"
TEST_LABEL = "gpusplit.io/gang-test"


def wait_lab_healthy(timeout: float = 180) -> None:
    health = labctl.wait_healthy(timeout)
    assert health and all(v["healthy"] for v in health.values()), labctl.report_unhealthy(
        health or labctl.health()
    )


def set_gpus(kubectl, node: str, count: int) -> None:
    patch = [
        {"op": "add", "path": "/status/capacity/nvidia.com~1gpu", "value": str(count)},
        {"op": "add", "path": "/status/allocatable/nvidia.com~1gpu", "value": str(count)},
    ]
    kubectl("patch", "node", node, "--subresource=status", "--type=json", "-p", json.dumps(patch))


def node_ready(kubectl, node: str) -> bool:
    conditions = kubectl.json("get", "node", node)["status"].get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


@pytest.fixture(scope="module")
def gang(lab, kubectl, core_api):
    """GenericWorkload on (through the role), two nodes of our own with 2 + 1 GPUs, a namespace."""
    found = {p.name: p.read_bytes() for p in C.MANIFESTS.glob("*.yaml")}
    C.write_manifests(force=True)
    wait_lab_healthy()
    enable_generic_workload()
    assert "scheduling.k8s.io/v1beta1" in kubectl("api-versions").stdout.split()

    run = uuid.uuid4().hex[:6]
    ns = f"gang-{run}"
    names = [f"gang-{run}-{i}" for i in range(2)]
    for name in names:
        labnodes.ensure_node(core_api, name, labels={TEST_LABEL: run})
        kubectl("taint", "node", name, f"{TEST_LABEL}={run}:NoSchedule", "--overwrite")
    set_gpus(kubectl, names[0], 2)
    set_gpus(kubectl, names[1], 1)
    for name in names:
        kubectl.wait_for(lambda n=name: node_ready(kubectl, n), timeout=90, what=f"node {name} Ready")
    kubectl.namespace(ns)
    ctx = {"ns": ns, "run": run, "nodes": names}
    yield ctx

    # our objects go while the controller-manager still handles the PodGroup finalizer
    kubectl(
        "-n",
        ns,
        "delete",
        "pods,podgroups.scheduling.k8s.io",
        "--all",
        "--wait=true",
        "--timeout=90s",
        check=False,
    )
    kubectl("delete", "namespace", ns, "--wait=false", check=False)
    for name in names:
        kubectl("delete", "node", name, "--wait=false", check=False)
    if {p.name: p.read_bytes() for p in C.MANIFESTS.glob("*.yaml")} != found:
        for name, data in found.items():
            (C.MANIFESTS / name).write_bytes(data)
        time.sleep(2)
    wait_lab_healthy()


def job(ctx: dict, name: str, policy: str = "gang") -> dict:
    spec = {
        "name": name,
        "namespace": ctx["ns"],
        "replicas": 4,
        "policy": policy,
        "gpus_per_pod": 1,
        "node_selector": {TEST_LABEL: ctx["run"]},
        "tolerations": [
            {"key": TEST_LABEL, "operator": "Equal", "value": ctx["run"], "effect": "NoSchedule"}
        ],
        "termination_grace_period_seconds": 0,
    }
    if policy == "gang":
        spec["min_count"] = 4
    return spec


def apply(kubectl, objects: list[dict]) -> None:
    # as JSON: PyYAML writes a string such as 8948e5 (a run id) unquoted, which kubectl's YAML 1.2
    # reader then takes for a number
    kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))


def pods(kubectl, ctx: dict, group: str) -> list[dict]:
    return kubectl.json("-n", ctx["ns"], "get", "pods", "-l", f"gpusplit.io/podgroup={group}")["items"]


def scheduled(pod: dict) -> dict:
    return next((c for c in pod["status"].get("conditions") or [] if c["type"] == "PodScheduled"), {})


def delete_group(kubectl, ctx: dict, group: str) -> None:
    kubectl(
        "-n",
        ctx["ns"],
        "delete",
        "pods",
        "-l",
        f"gpusplit.io/podgroup={group}",
        "--wait=true",
        "--timeout=60s",
    )
    kubectl(
        "-n",
        ctx["ns"],
        "delete",
        "podgroups.scheduling.k8s.io",
        group,
        "--ignore-not-found",
        "--wait=true",
        "--timeout=60s",
    )


def test_gang_of_four_with_three_free_gpus_schedules_none(gang, kubectl):
    objects = workload.render_gang_job(job(gang, "train"), "1.37")
    apply(kubectl, objects)
    created = pods(kubectl, gang, "train")
    assert len(created) == 4
    assert all(
        p["spec"]["schedulingGroup"] == {"podGroupName": "train"} for p in created
    )  # kept: the gate is on

    # every member has been tried and refused ...
    kubectl.wait_for(
        lambda: all(scheduled(p).get("status") == "False" for p in pods(kubectl, gang, "train")),
        timeout=90,
        what="all four members to be refused",
    )
    # ... and stays unbound while the scheduler keeps retrying (3 of the 4 would fit one by one)
    deadline = time.time() + 15
    while time.time() < deadline:
        members = pods(kubectl, gang, "train")
        assert not [p["metadata"]["name"] for p in members if p["spec"].get("nodeName")], members
        time.sleep(1)
    members = pods(kubectl, gang, "train")
    assert all(p["status"]["phase"] == "Pending" for p in members)
    messages = [scheduled(p).get("message", "") for p in members]
    assert any("minCount (4) cannot be satisfied" in m for m in messages), messages
    group = kubectl.json("-n", gang["ns"], "get", "podgroups.scheduling.k8s.io", "train")
    condition = next(c for c in group["status"]["conditions"] if c["type"] == "PodGroupInitiallyScheduled")
    assert condition["status"] == "False" and condition["reason"] == "Unschedulable"
    assert "minCount (4) cannot be satisfied" in condition["message"], condition
    print(f"\nscheduler, 3 GPUs free: {sorted(set(messages))}; PodGroup: {condition['message']}")


def test_gang_of_four_is_scheduled_together_once_four_gpus_are_free(gang, kubectl):
    set_gpus(kubectl, gang["nodes"][1], 2)
    started = time.monotonic()
    kubectl.wait_for(
        lambda: all(p["spec"].get("nodeName") for p in pods(kubectl, gang, "train")),
        timeout=120,
        what="all four members to be bound",
    )
    bound = time.monotonic() - started
    members = pods(kubectl, gang, "train")
    per_node = {}
    for p in members:
        per_node[p["spec"]["nodeName"]] = per_node.get(p["spec"]["nodeName"], 0) + 1
    assert per_node == dict.fromkeys(gang["nodes"], 2)
    kubectl.wait_for(
        lambda: all(p["status"]["phase"] == "Running" for p in pods(kubectl, gang, "train")),
        # kwok's watches may still be reconnecting after the GenericWorkload rollout restarted the apiserver
        timeout=180,
        what="kwok to run the four members",
    )
    group = kubectl.json("-n", gang["ns"], "get", "podgroups.scheduling.k8s.io", "train")
    condition = next(c for c in group["status"]["conditions"] if c["type"] == "PodGroupInitiallyScheduled")
    assert condition["status"] == "True" and condition["reason"] == "Scheduled"
    print(f"\nall four bound {bound:.1f}s after the fourth GPU appeared")


def test_basic_policy_schedules_what_fits(gang, kubectl):
    delete_group(kubectl, gang, "train")
    set_gpus(kubectl, gang["nodes"][1], 1)
    kubectl.wait_for(
        lambda: kubectl.json("get", "node", gang["nodes"][1])["status"]["allocatable"].get(GPU) == "1",
        what="node back to one GPU",
    )
    apply(kubectl, workload.render_gang_job(job(gang, "loose", policy="basic"), "1.37"))
    kubectl.wait_for(
        lambda: (
            sum(1 for p in pods(kubectl, gang, "loose") if p["spec"].get("nodeName")) == 3
            and any(
                "Insufficient nvidia.com/gpu" in scheduled(p).get("message", "")
                for p in pods(kubectl, gang, "loose")
            )
        ),
        timeout=90,
        what="three of four bound, one short of a GPU",
    )
    time.sleep(3)
    members = pods(kubectl, gang, "loose")
    assert sum(1 for p in members if p["spec"].get("nodeName")) == 3
    (pending,) = [p for p in members if not p["spec"].get("nodeName")]
    assert "Insufficient nvidia.com/gpu" in scheduled(pending)["message"]
