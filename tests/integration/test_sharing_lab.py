"""Time-slicing a node's Kubernetes share on the lab (docs/sharing.md), mode device_plugin.

Real kube-apiserver, scheduler and controller-manager; the kubelets are kwok and the device plugin's
advertisement is lab.deviceplugin, which reads the split DaemonSet's config file from the ConfigMap it
mounts as the real plugin does. lab-a100-01 (a100-mig: GPUs 0 and 1 with MIG, 2 and 3 without) keeps
GPUs 0 and 1 for the host and gives 2 and 3 to Kubernetes, time-sliced x4 and renamed: 8
nvidia.com/gpu.shared. Eight pods run, a ninth is Pending and diagnose says why.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import pytest
from ansible_output import ansible_playbook, changed_tasks, inventory_copy, recap

from ansible_collections.gpusplit.k8s.plugins.module_utils._diagnose.report import diagnose
from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.scheduling import GPU_RESOURCE_PREFIXES
from ansible_collections.gpusplit.k8s.plugins.modules import gpu_pending_diagnose as module
from lab import components as C

ROOT = Path(__file__).resolve().parents[2]
INVENTORY = ROOT / "inventory" / "lab"
NODE = "lab-a100-01"
SHARED = "nvidia.com/gpu.shared"
PLUGIN_SELECTOR = "app.kubernetes.io/managed-by=gpusplit,app.kubernetes.io/name=gpusplit-device-plugin"
LIMIT = ("-e", f"gpusplit_hosts={NODE}")
SHARING = {"time_slicing": {"replicas": 4, "rename": True, "fail_requests_greater_than_one": True}}

pytestmark = pytest.mark.integration


def run(playbook, inventory, *extra):
    proc = ansible_playbook(playbook, inventory, *extra)
    if proc.returncode != 0:
        raise AssertionError(f"{playbook} failed:\n{proc.stdout[-6000:]}\n{proc.stderr[-2000:]}")
    return proc


def shared_inventory(tmp_path: Path, sharing=SHARING) -> Path:
    # the fixture's python on GPU 1 is a container's in tests/fixtures/proc; here it is the host's own (a login
    # session's cgroup), as on a host that keeps GPUs 0 and 1 for its own processes
    proc = tmp_path / "proc"
    (proc / "51077").mkdir(parents=True)
    (proc / "51077" / "cgroup").write_text("0::/user.slice/user-1000.slice/session-3.scope\n")

    def edit(hosts):
        hosts[NODE].update(
            gpusplit_mode="device_plugin",
            gpusplit_split={"host_count": 2},
            gpusplit_sharing=sharing,
            gpusplit_discovery_proc_root=str(proc),
        )

    return inventory_copy(tmp_path, edit)


def fixture_uuids() -> list[str]:
    doc = json.loads((ROOT / "tests" / "fixtures" / "gpus" / "a100-mig.json").read_text())
    return [g["uuid"] for g in sorted(doc["gpus"], key=lambda g: g["index"])]


def shared_pod(ns: str, name: str, count: int = 1) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": NODE},
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [{"name": "c", "image": "cuda", "resources": {"limits": {SHARED: str(count)}}}],
        },
    }


def diagnosis(ns):
    """What the module gpu_pending_diagnose does: one read of the cluster, then the classifier."""
    from kubernetes import config

    api = config.new_client_from_config(str(C.KUBECONFIG))
    pods, nodes, events, podgroups, resource = module.read_cluster(api, GPU_RESOURCE_PREFIXES)
    report = diagnose(pods, nodes, events, podgroups, resource, namespaces=[ns])
    return {e["name"]: e for e in report["pods"]}


@pytest.fixture(scope="module")
def shared_node(lab, kubectl, tmp_path_factory):
    inventory = shared_inventory(tmp_path_factory.mktemp("sharing"))
    proc = run("site.yml", inventory, *LIMIT)
    try:
        yield proc, inventory
    finally:
        run("site.yml", INVENTORY, *LIMIT, "-e", "gpusplit_resplit_policy=evict")  # back to mode none


def test_the_node_advertises_its_two_gpus_four_times_and_verifies(shared_node, kubectl):
    report = json.loads((C.OUT / "fleet-report.json").read_text())
    [entry] = [n for n in report["nodes"] if n["name"] == NODE]
    assert entry["verdict"] == "OK", entry
    assert entry["expected_resources"] == {"nvidia.com/gpu": 0, SHARED: 8}
    allocatable = kubectl.json("get", "node", NODE)["status"]["allocatable"]
    assert (allocatable[SHARED], allocatable["nvidia.com/gpu"]) == ("8", "0")
    plan = json.loads((C.OUT / "fleet-plan.json").read_text())["nodes"][NODE]
    uuids = fixture_uuids()
    assert (plan["host_uuids"], plan["kubernetes_uuids"]) == (uuids[:2], uuids[2:])


def test_the_host_gpus_are_in_no_plugin_config(shared_node, kubectl):
    configs = kubectl.json("get", "configmaps", "-A", "-l", PLUGIN_SELECTOR)["items"]
    mine = [c for c in configs if c["metadata"]["annotations"]["gpusplit.io/node-name"] == NODE]
    assert [c["metadata"]["name"] for c in mine] == [f"gpusplit-dp-{NODE}"]
    text = json.dumps(configs)
    assert not any(u in text for u in fixture_uuids()[:2])
    [ds] = [
        d
        for d in kubectl.json("get", "daemonsets", "-A", "-l", PLUGIN_SELECTOR)["items"]
        if d["metadata"]["annotations"]["gpusplit.io/node-name"] == NODE
    ]
    container = ds["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["CONFIG_FILE"] == "/config/config.yaml"
    assert env["NVIDIA_VISIBLE_DEVICES"].split(",") == fixture_uuids()[2:]
    assert ds["metadata"]["annotations"]["gpusplit.io/sharing"] == (
        f"time-slicing x4 ({SHARED}, failRequestsGreaterThanOne)"
    )


def test_a_rerun_changes_nothing(shared_node):
    _proc, inventory = shared_node
    proc = run("site.yml", inventory, *LIMIT)
    assert all(r["changed"] == 0 for r in recap(proc.stdout).values()), changed_tasks(proc.stdout)


@pytest.fixture(scope="module")
def busy(shared_node, kubectl):
    """Eight pods on the eight replicas of the node, and a ninth that does not fit."""
    ns = kubectl.namespace(f"sharing-{uuid.uuid4().hex[:6]}")
    try:
        for i in range(8):
            kubectl("apply", "-f", "-", stdin=json.dumps(shared_pod(ns, f"nb-{i}")))
        kubectl.wait_running(ns, 8, what="eight pods running on the time-sliced node")
        kubectl("apply", "-f", "-", stdin=json.dumps(shared_pod(ns, "nb-8")))
        yield ns
    finally:
        # waited for: the node's restore in shared_node's teardown must not find these pods half gone
        kubectl("delete", "namespace", ns, "--wait=true", "--timeout=180s", check=False)


def test_eight_pods_run_and_diagnose_explains_the_ninth(busy):
    deadline = time.time() + 90
    entries = {}
    while time.time() < deadline and "nb-8" not in entries:
        entries = diagnosis(busy)
        time.sleep(2)
    entry = entries["nb-8"]
    assert entry["class"] == "insufficient_gpu", entry
    assert f"{NODE}: {SHARED} allocatable 8, requested 8, free 0, pod wants 1" in entry["summary"]
    assert "time-sliced" in entry["summary"] and "gpusplit_sharing" in entry["next"], entry
    assert set(entries) == {"nb-8"}


def test_a_sharing_change_on_the_busy_node_is_refused_and_changes_nothing(busy, kubectl, tmp_path):
    ns = busy
    before = kubectl.json("get", "node", NODE)["status"]["allocatable"][SHARED]
    inventory = shared_inventory(tmp_path, {"time_slicing": {"replicas": 2, "rename": True}})
    proc = ansible_playbook("site.yml", inventory, *LIMIT)
    assert proc.returncode != 0, proc.stdout[-3000:]
    assert (
        f"The node's sharing changes (time-slicing x4 ({SHARED}, failRequestsGreaterThanOne) -> "
        in proc.stdout
    )
    assert f"{ns}/nb-0 holds GPU" in proc.stdout and "Nothing was changed" in proc.stdout
    diff = json.loads((C.OUT / "resplit-diff.json").read_text())
    [node] = diff["nodes"]
    assert node["sharing"]["after"] == f"time-slicing x2 ({SHARED})"
    assert sorted(h["pod"] for h in node["holders"]) == [f"nb-{i}" for i in range(8)]
    assert kubectl.json("get", "node", NODE)["status"]["allocatable"][SHARED] == before


def test_evict_takes_exactly_the_holders_and_the_node_advertises_the_new_sharing(busy, kubectl, tmp_path):
    ns = busy
    inventory = shared_inventory(tmp_path, {"time_slicing": {"replicas": 2, "rename": True}})
    run("site.yml", inventory, *LIMIT, "-e", "gpusplit_resplit_policy=evict")
    left = {p["metadata"]["name"] for p in kubectl.json("-n", ns, "get", "pods")["items"]}
    assert not left & {f"nb-{i}" for i in range(8)}, left  # every holder of a replica was evicted
    report = json.loads((C.OUT / "fleet-report.json").read_text())
    [entry] = [n for n in report["nodes"] if n["name"] == NODE]
    assert entry["verdict"] == "OK", entry
    assert kubectl.json("get", "node", NODE)["status"]["allocatable"][SHARED] == "4"
    [ds] = [
        d
        for d in kubectl.json("get", "daemonsets", "-A", "-l", PLUGIN_SELECTOR)["items"]
        if d["metadata"]["annotations"]["gpusplit.io/node-name"] == NODE
    ]
    assert ds["metadata"]["annotations"]["gpusplit.io/sharing"] == f"time-slicing x2 ({SHARED})"
