"""Changing the split of a busy node on the lab (docs/resplit.md), mode device_plugin.

Real kube-apiserver, scheduler and controller-manager; the kubelets are kwok, the device plugin's
advertisement is lab.deviceplugin and the kubelet's device assignment with its pod-resources API is
lab.podresources (a real gRPC server per lab host). A GPU pod bound by the scheduler on lab-dgx-01
gets a GPU; the node is re-planned so that exactly that GPU goes to the host.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from ansible_output import ansible_module, ansible_playbook, inventory_copy

from lab import components as C

ROOT = Path(__file__).resolve().parents[2]
INVENTORY = ROOT / "inventory" / "lab"
NODE = "lab-dgx-01"
PLUGIN_SELECTOR = "app.kubernetes.io/managed-by=gpusplit,app.kubernetes.io/name=gpusplit-device-plugin"
LIMIT = ("-e", f"gpusplit_hosts={NODE}")

pytestmark = pytest.mark.integration


def run(playbook, inventory=INVENTORY, *extra, ok=True):
    """ansible-playbook; ok True: must pass, False: must fail, None: either."""
    proc = ansible_playbook(playbook, inventory, *extra)
    if ok is True and proc.returncode != 0:
        raise AssertionError(f"{playbook} failed:\n{proc.stdout[-6000:]}\n{proc.stderr[-2000:]}")
    if ok is False and proc.returncode == 0:
        raise AssertionError(f"{playbook} should have failed:\n{proc.stdout[-6000:]}")
    return proc


def pod_resources(host: str) -> dict:
    """The kubelet's List answer on ``host``, through the module as a user runs it (ad hoc)."""
    return ansible_module(
        host,
        "gpusplit.k8s.gpu_pod_resources",
        "socket={{ gpusplit_host_root }}/var/lib/kubelet/pod-resources/kubelet.sock",
        INVENTORY,
    )


def dgx_facts() -> dict:
    return json.loads((ROOT / "tests" / "fixtures" / "gpus" / "dgx-h100.json").read_text())


def index_of(gpu_uuid: str) -> int:
    return next(g["index"] for g in dgx_facts()["gpus"] if g["uuid"] == gpu_uuid)


def inventory_with(tmp_path: Path, split: dict) -> Path:
    return inventory_copy(tmp_path, lambda hosts: hosts[NODE].update(gpusplit_split=split))


def gpu_pod(ns: str, name: str, labels: dict | None = None) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": labels or {"app": name}},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": NODE},
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [{"name": "c", "image": "cuda", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
        },
    }


def state(kubectl) -> dict:
    """What a refused run must leave as it was: the DaemonSet's generation, allocatable, labels."""
    [ds] = [
        d
        for d in kubectl.json("get", "daemonsets", "-A", "-l", PLUGIN_SELECTOR)["items"]
        if d["metadata"]["annotations"].get("gpusplit.io/node-name") == NODE
    ]
    node = kubectl.json("get", "node", NODE)
    return {
        "generation": ds["metadata"]["generation"],
        "allocatable": node["status"]["allocatable"].get("nvidia.com/gpu"),
        "labels": {k: v for k, v in node["metadata"]["labels"].items() if k.startswith("gpusplit.io/")},
    }


def held_by(host: str, ns: str) -> dict[str, str]:
    """{pod name: GPU UUID} of the pods of ``ns`` in the kubelet's answer."""
    return {
        h["pod"]: h["device_id"]
        for h in pod_resources(host)["holders"]
        if h["namespace"] == ns and h.get("resource_name") == "nvidia.com/gpu"
    }


def fixture_processes(gpu_uuid: str) -> list:
    """The processes the dgx-h100 fixture reports on a GPU (static: GPUs 4 and 5 have container ones)."""
    return next(g.get("processes") or [] for g in dgx_facts()["gpus"] if g["uuid"] == gpu_uuid)


@pytest.fixture(scope="module")
def busy_node(lab, kubectl):
    """lab-dgx-01 split as the inventory says (GPUs 2-7 to Kubernetes), with two GPU pods running."""
    for old in kubectl.json("get", "namespaces")["items"]:  # an interrupted earlier run's pods
        if old["metadata"]["name"].startswith("resplit-"):
            kubectl("delete", "namespace", old["metadata"]["name"], "--wait=true", check=False)
    run("site.yml", INVENTORY, *LIMIT)
    ns = f"resplit-{uuid.uuid4().hex[:6]}"
    kubectl.namespace(ns)
    try:
        for name in ("train-0", "infer-0"):
            kubectl("apply", "-f", "-", stdin=json.dumps(gpu_pod(ns, name)))
        held = kubectl.wait_for(
            lambda: (lambda h: h if len(h) == 2 else None)(held_by(NODE, ns)),
            timeout=90,
            what="two pods holding GPUs",
        )
        # the fixture's GPUs 4 and 5 run container processes of their own, which verify would (rightly)
        # report once those GPUs are the host's: the first free GPUs (2 and 3) must be the pods'
        assert not any(fixture_processes(u) for u in held.values()), (
            f"the pods got {held}: another GPU pod holds GPUs 2 or 3 of {NODE}"
        )
        yield ns, held
    finally:
        kubectl("delete", "namespace", ns, "--wait=false", check=False)
        run("site.yml", INVENTORY, *LIMIT, "-e", "gpusplit_resplit_policy=evict")


def test_the_kubelet_answer_names_distinct_gpus_of_the_kubernetes_share(busy_node):
    _ns, held = busy_node
    assert len(set(held.values())) == 2
    assert all(index_of(u) >= 2 for u in held.values())  # the host keeps GPUs 0 and 1


def test_refuse_stops_with_the_pod_and_changes_nothing(busy_node, kubectl, tmp_path):
    ns, held = busy_node
    moving = index_of(held["train-0"])
    inventory = inventory_with(tmp_path, {"host_indices": [0, 1, moving]})
    before = state(kubectl)
    proc = run("site.yml", inventory, *LIMIT, ok=False)
    assert f"{ns}/train-0 holds GPU {moving}" in proc.stdout
    assert "infer-0" not in proc.stdout.split("holds GPU", 1)[1].split("\n", 1)[0]
    assert "Nothing was changed" in proc.stdout
    assert state(kubectl) == before
    diff = json.loads((C.OUT / "resplit-diff.json").read_text())
    [node] = diff["nodes"]
    assert [m["index"] for m in node["to_host"]] == [moving]
    assert [h["pod"] for h in node["holders"]] == ["train-0"]


def test_check_mode_prints_the_diff_and_the_pods_and_changes_nothing(busy_node, kubectl, tmp_path):
    ns, held = busy_node
    moving = index_of(held["train-0"])
    inventory = inventory_with(tmp_path, {"host_indices": [0, 1, moving]})
    before = state(kubectl)
    proc = run("site.yml", inventory, *LIMIT, "--check", "-e", "gpusplit_resplit_policy=evict", ok=None)
    assert f"to the host:      {moving} (" in proc.stdout
    assert f"by pod {ns}/train-0" in proc.stdout
    assert state(kubectl) == before
    assert kubectl.json("-n", ns, "get", "pod", "train-0")["status"]["phase"] == "Running"


def test_a_pdb_blocks_evict_and_nothing_changes(busy_node, kubectl, tmp_path):
    ns, held = busy_node
    moving = index_of(held["train-0"])
    inventory = inventory_with(tmp_path, {"host_indices": [0, 1, moving]})
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "keep-train", "namespace": ns},
        "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "train-0"}}},
    }
    kubectl("apply", "-f", "-", stdin=json.dumps(pdb))
    try:
        kubectl.wait_for(
            lambda: (
                kubectl.json("-n", ns, "get", "pdb", "keep-train").get("status", {}).get("observedGeneration")
            ),
            what="the disruption controller on the PDB",
        )
        before = state(kubectl)
        proc = run("site.yml", inventory, *LIMIT, "-e", "gpusplit_resplit_policy=evict", ok=False)
        assert "keep-train" in proc.stdout
        assert state(kubectl) == before
        assert kubectl.json("-n", ns, "get", "pod", "train-0")["status"]["phase"] == "Running"
    finally:
        kubectl("-n", ns, "delete", "pdb", "keep-train")


def test_evict_takes_exactly_that_pod_then_the_node_verifies(busy_node, kubectl, tmp_path):
    ns, held = busy_node
    moving = index_of(held["train-0"])
    inventory = inventory_with(tmp_path, {"host_indices": [0, 1, moving]})
    proc = run("site.yml", inventory, *LIMIT, "-e", "gpusplit_resplit_policy=evict")
    pods = {p["metadata"]["name"] for p in kubectl.json("-n", ns, "get", "pods")["items"]}
    assert pods == {"infer-0"}
    assert held_by(NODE, ns) == {"infer-0": held["infer-0"]}
    report = json.loads((C.OUT / "fleet-report.json").read_text())
    [node] = [n for n in report["nodes"] if n["name"] == NODE]
    assert node["verdict"] == "OK", proc.stdout[-3000:]
    assert kubectl.json("get", "node", NODE)["status"]["allocatable"]["nvidia.com/gpu"] == "5"


def test_wait_fences_first_then_gives_up_naming_the_pod(busy_node, kubectl, tmp_path):
    ns, held = busy_node
    moving = index_of(held["infer-0"])
    # after the eviction test the host has 0, 1 and train-0's GPU; now infer-0's moves too
    inventory = inventory_with(tmp_path, {"host_indices": sorted({0, 1, index_of(held["train-0"]), moving})})
    proc = run(
        "site.yml",
        inventory,
        *LIMIT,
        "-e",
        "gpusplit_resplit_policy=wait",
        "-e",
        "gpusplit_resplit_wait_seconds=6",
        ok=False,
    )
    assert f"{ns}/infer-0" in proc.stdout and "No new pod gets those GPUs" in proc.stdout
    # the split plugin already runs without the moving GPU: the node advertises one GPU less
    kubectl.wait_for(
        lambda: kubectl.json("get", "node", NODE)["status"]["allocatable"]["nvidia.com/gpu"] == "4",
        what="the fenced node's allocatable",
    )
    assert kubectl.json("-n", ns, "get", "pod", "infer-0")["status"]["phase"] == "Running"
    kubectl("-n", ns, "delete", "pod", "infer-0", "--wait=true")
    run("site.yml", inventory, *LIMIT, "-e", "gpusplit_resplit_policy=wait")


@pytest.mark.parametrize("unread", ["broken socket", "discovery told not to read"])
def test_unread_pod_resources_stop_a_gpu_leaving_kubernetes_whatever_the_policy(
    busy_node, kubectl, tmp_path, unread
):
    """The discovery has no answer of the node's kubelet: who holds the GPUs that leave Kubernetes is
    unknown, so even evict stops before any change, with the reason; the running pods keep running.
    (Whatever the earlier tests left: GPUs 2 to 6 go to the host, and some of them are in the live share.)"""
    ns, _held = busy_node
    not_a_socket = tmp_path / "not-a-socket"
    not_a_socket.write_text("")

    def edit(hosts):
        hosts[NODE]["gpusplit_split"] = {"host_indices": [0, 1, 2, 3, 4, 5, 6]}
        if unread == "broken socket":
            hosts[NODE]["gpusplit_pod_resources_socket"] = str(not_a_socket)
        else:
            hosts[NODE]["gpusplit_discovery_pod_resources"] = False

    def running():
        return sorted(
            p["metadata"]["name"]
            for p in kubectl.json("-n", ns, "get", "pods")["items"]
            if p["status"].get("phase") == "Running"
        )

    inventory = inventory_copy(tmp_path, edit)
    before, pods_before = state(kubectl), running()
    proc = run("site.yml", inventory, *LIMIT, "-e", "gpusplit_resplit_policy=evict", ok=False)
    assert f"{NODE}: a GPU may leave the node's Kubernetes share" in proc.stdout
    assert "Nothing was changed" in proc.stdout
    if unread == "broken socket":
        assert (
            "the discovery could not read them" in proc.stdout
            and "gpusplit_pod_resources_socket" in proc.stdout
        )
    else:
        assert "gpusplit_discovery_pod_resources is false" in proc.stdout
    assert state(kubectl) == before
    assert running() == pods_before
    diff = json.loads((C.OUT / "resplit-diff.json").read_text())
    assert [u["host"] for u in diff["unread"]] == [NODE]
