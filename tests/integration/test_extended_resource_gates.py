"""The extended-resource gates of the real kube-apiserver and kube-scheduler, on the whole lab.

A node advertises nvidia.com/gpu: 2 in its status (what a device plugin would report; kwok keeps
the node alive). The apiserver enforces the two extended-resource rules, the scheduler places a
GPU pod by numbers alone, and a Pending pod's PodScheduled message tells a taint from a shortage.
"""

from __future__ import annotations

import json
import uuid

import pytest
import yaml

from lab import nodes as labnodes

GPU = "nvidia.com/gpu"
TAINT = "nvidia.com/gpu=present:NoSchedule"
DISCOVERY_LABELS = {
    "nvidia.com/gpu.present": "true",
    "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB",
    "nvidia.com/gpu.count": "2",
    "nvidia.com/gpu.deploy.device-plugin": "true",
}


def pod(name: str, ns: str, *, limits=None, requests=None, tolerate=False, node_selector=None) -> str:
    resources = {}
    if limits is not None:
        resources["limits"] = limits
    if requests is not None:
        resources["requests"] = requests
    spec = {
        "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10", "resources": resources}],
        "terminationGracePeriodSeconds": 0,
    }
    if tolerate:
        spec["tolerations"] = [{"key": GPU, "operator": "Equal", "value": "present", "effect": "NoSchedule"}]
    if node_selector:
        spec["nodeSelector"] = node_selector
    return yaml.safe_dump(
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns}, "spec": spec}
    )


def scheduled_condition(kubectl, ns: str, name: str) -> dict:
    obj = kubectl.json("-n", ns, "get", "pod", name)
    for cond in obj.get("status", {}).get("conditions", []):
        if cond["type"] == "PodScheduled":
            return cond
    return {}


@pytest.fixture(scope="module")
def gated(kubectl, core_api):
    """Namespace gpu-why-<id>, three nodes, only node 0 labelled and advertising 2 GPUs.

    Every other schedulable node of the shared lab is cordoned for the module, so that the
    scheduler sees only these three nodes: earlier tests may have left GPU labels on lab nodes
    that advertise no GPUs, and a CPU-only pod selecting `nvidia.com/gpu.present` would land there.
    They are uncordoned afterwards.
    """
    run = uuid.uuid4().hex[:6]
    ns = f"gpu-why-{run}"
    names = [f"gated-{run}-node-{i}" for i in range(3)]
    kubectl.namespace(ns)
    for name in names:
        labnodes.ensure_node(core_api, name)
    cordoned = []
    for node in kubectl.json("get", "nodes")["items"]:
        name = node["metadata"]["name"]
        if name in names or node["spec"].get("unschedulable"):
            continue
        kubectl.retrying("cordon", name)
        cordoned.append(name)
    node0 = names[0]
    kubectl("label", "node", node0, *[f"{k}={v}" for k, v in DISCOVERY_LABELS.items()], "--overwrite")
    patch = [
        {"op": "add", "path": "/status/capacity/nvidia.com~1gpu", "value": "2"},
        {"op": "add", "path": "/status/allocatable/nvidia.com~1gpu", "value": "2"},
    ]
    kubectl("patch", "node", node0, "--subresource=status", "--type=json", "-p", json.dumps(patch))
    yield {"ns": ns, "node0": node0, "nodes": names}
    kubectl("delete", "namespace", ns, "--wait=false", check=False)
    for name in names:
        kubectl("delete", "node", name, "--wait=false", check=False)
    for name in cordoned:
        kubectl("uncordon", name, check=False)


def test_advertised_numbers(gated, kubectl):
    advertised = {
        n: kubectl.json("get", "node", n)["status"]["allocatable"].get(GPU, "0") for n in gated["nodes"]
    }
    assert advertised == {gated["nodes"][0]: "2", gated["nodes"][1]: "0", gated["nodes"][2]: "0"}
    labels = kubectl.json("get", "node", gated["node0"])["metadata"]["labels"]
    assert {k: labels.get(k) for k in DISCOVERY_LABELS} == DISCOVERY_LABELS


def test_apiserver_rejects_requests_unequal_to_limits(gated, kubectl):
    manifest = pod("bad-mismatch", gated["ns"], requests={GPU: "1"}, limits={GPU: "2"})
    proc = kubectl("apply", "-f", "-", stdin=manifest, check=False)
    assert proc.returncode != 0
    assert "must be equal to nvidia.com/gpu limit" in proc.stderr, proc.stderr


def test_apiserver_rejects_fractional_gpu(gated, kubectl):
    manifest = pod("bad-fraction", gated["ns"], requests={GPU: "0.5"}, limits={GPU: "0.5"})
    proc = kubectl("apply", "-f", "-", stdin=manifest, check=False)
    assert proc.returncode != 0
    assert "must be an integer" in proc.stderr, proc.stderr


def test_limits_only_fills_requests_and_lands_on_advertising_node(gated, kubectl):
    kubectl("apply", "-f", "-", stdin=pod("trainer", gated["ns"], limits={GPU: "1"}))
    obj = kubectl.json("-n", gated["ns"], "get", "pod", "trainer")
    assert obj["spec"]["containers"][0]["resources"]["requests"] == {GPU: "1"}
    assert "nodeSelector" not in obj["spec"]
    node = kubectl.wait_for(
        lambda: kubectl.json("-n", gated["ns"], "get", "pod", "trainer")["spec"].get("nodeName"),
        what="trainer to be bound",
    )
    assert node == gated["node0"]


def test_taint_keeps_non_gpu_pod_pending(gated, kubectl):
    kubectl("taint", "node", gated["node0"], TAINT, "--overwrite")
    kubectl(
        "apply",
        "-f",
        "-",
        stdin=pod("cpu-only", gated["ns"], node_selector={"nvidia.com/gpu.present": "true"}),
    )
    cond = kubectl.wait_for(
        lambda: (c := scheduled_condition(kubectl, gated["ns"], "cpu-only")) and c.get("message") and c,
        what="cpu-only PodScheduled condition",
    )
    assert cond["status"] == "False" and cond["reason"] == "Unschedulable"
    # Kubernetes 1.37 words it "1 node(s) had untolerated taint(s)": the node, not the taint key
    assert "1 node(s) had untolerated taint(s)" in cond["message"], cond
    assert "Insufficient" not in cond["message"], cond
    # NoSchedule does not evict what already runs there
    assert kubectl.json("-n", gated["ns"], "get", "pod", "trainer")["spec"]["nodeName"] == gated["node0"]


def test_tolerating_gpu_pod_passes_both_gates(gated, kubectl):
    kubectl("apply", "-f", "-", stdin=pod("trainer2", gated["ns"], limits={GPU: "1"}, tolerate=True))
    node = kubectl.wait_for(
        lambda: kubectl.json("-n", gated["ns"], "get", "pod", "trainer2")["spec"].get("nodeName"),
        what="trainer2 to be bound",
    )
    assert node == gated["node0"]
    assert not kubectl.json("-n", gated["ns"], "get", "pod", "cpu-only")["spec"].get("nodeName")


def test_exhausted_gpus_leave_next_pod_pending_for_resources(gated, kubectl):
    kubectl("apply", "-f", "-", stdin=pod("trainer3", gated["ns"], limits={GPU: "1"}, tolerate=True))
    cond = kubectl.wait_for(
        lambda: (c := scheduled_condition(kubectl, gated["ns"], "trainer3")) and c.get("message") and c,
        what="trainer3 PodScheduled condition",
    )
    assert cond["status"] == "False"
    assert "Insufficient nvidia.com/gpu" in cond["message"], cond
    assert "untolerated taint" not in cond["message"].split("Insufficient")[0].split(gated["node0"])[0]
    pods = kubectl.json("-n", gated["ns"], "get", "pods")["items"]
    used = sum(
        int(c["resources"].get("requests", {}).get(GPU, "0"))
        for p in pods
        if p["spec"].get("nodeName") == gated["node0"]
        for c in p["spec"]["containers"]
    )
    pending = sum(1 for p in pods if p["status"].get("phase") == "Pending" and not p["spec"].get("nodeName"))
    assert used == 2
    assert pending == 2  # cpu-only and trainer3
