"""The per-node split end to end on the lab: site.yml, re-run, change, prune, check mode, verify.

Everything cluster-side is the real kube-apiserver/scheduler/controller-manager; the nodes'
kubelets are kwok and the device plugin is lab.deviceplugin (it advertises what the runtime
would let the plugin container see).
"""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path
from xml.etree import ElementTree

import pytest
from ansible_output import ansible_playbook, inventory_copy, recap

from lab import components as C

ROOT = Path(__file__).resolve().parents[2]
INVENTORY = ROOT / "inventory" / "lab"
PLUGIN_SELECTOR = "app.kubernetes.io/managed-by=gpusplit,app.kubernetes.io/name=gpusplit-device-plugin"
WRITE_VERBS = ("POST", "PUT", "PATCH", "APPLY", "DELETE")


def run_playbook(playbook: str, inventory: Path = INVENTORY, *extra: str, check: bool = True):
    proc = ansible_playbook(playbook, inventory, *extra)
    if check and proc.returncode != 0:
        raise AssertionError(f"{playbook} failed:\n{proc.stdout[-6000:]}\n{proc.stderr[-3000:]}")
    return proc


def writes(kubectl, resources=("daemonsets", "nodes", "namespaces")) -> int:
    text = kubectl("get", "--raw", "/metrics").stdout
    total = 0
    for line in text.splitlines():
        if not line.startswith("apiserver_request_total{") or 'dry_run="All"' in line:
            continue
        res = re.search(r'resource="([^"]+)"', line)
        verb = re.search(r'verb="([A-Z]+)"', line)
        component = re.search(r'component="([^"]*)"', line)
        if res and verb and res.group(1) in resources and verb.group(1) in WRITE_VERBS:
            # only what gpusplit sends: the controllers' own status updates do not count
            if 'subresource="status"' in line or (component and component.group(1) != "apiserver"):
                continue
            total += int(float(line.rsplit(" ", 1)[1]))
    return total


def plugin_daemonsets(kubectl) -> dict[str, dict]:
    items = kubectl.json("get", "daemonsets", "-A", "-l", PLUGIN_SELECTOR)["items"]
    return {d["metadata"]["name"]: d for d in items}


@pytest.fixture(scope="module")
def split(lab, kubectl):
    """The lab fleet split as the inventory says, via the main job."""
    proc = run_playbook("site.yml")
    yield proc
    run_playbook("site.yml")  # leave the lab as the inventory says


def test_site_applies_and_verifies_every_node(split, kubectl):
    report = json.loads((C.OUT / "fleet-report.json").read_text())
    assert report["counts"] == {"OK": 6, "DRIFT": 0, "FAIL": 0}, report
    plan = json.loads((C.OUT / "fleet-plan.json").read_text())
    for node in report["nodes"]:
        planned = plan["nodes"][node["host"]]
        assert node["kubernetes_gpus"] == planned["kubernetes_uuids"]
        live = kubectl.json("get", "node", node["name"])
        assert live["status"]["allocatable"]["nvidia.com/gpu"] == str(
            len(planned["kubernetes_uuids"]) if planned["mode"] != "none" else 0
        )
        assert live["metadata"]["labels"]["gpusplit.io/kubernetes-gpus"] == str(planned["kubernetes_count"])
    dss = plugin_daemonsets(kubectl)
    assert sorted(dss) == [
        "gpusplit-dp-lab-dgx-01",
        "gpusplit-dp-lab-h200-01",
        "gpusplit-dp-lab-hgx-lost-01",
        "gpusplit-dp-lab-ssh-01",
        "gpusplit-dp-lab-ws-01",
    ]
    dgx = dss["gpusplit-dp-lab-dgx-01"]["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in dgx["containers"][0]["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"].split(",") == plan["nodes"]["lab-dgx-01"]["kubernetes_uuids"]
    assert env["DEVICE_ID_STRATEGY"] == "uuid"
    assert not (dgx["containers"][0].get("securityContext") or {}).get("privileged")
    assert dgx["nodeSelector"] == {"kubernetes.io/hostname": "lab-dgx-01"}
    # the fleet table is printed, and the fleet picture is drawn where the console says
    assert "6 node(s): 6 OK, 0 DRIFT, 0 FAIL" in split.stdout
    assert_fleet_picture(split.stdout, report)


def assert_fleet_picture(stdout: str, report: dict) -> None:
    """out/fleet.svg is an SVG of the reported nodes and the console names it (roles/gpu_verify)."""
    picture = C.OUT / "fleet.svg"
    assert f"picture: {picture}" in stdout, stdout[-3000:]
    root = ElementTree.fromstring(picture.read_bytes())
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    text = picture.read_text()
    assert all(node["name"] in text for node in report["nodes"])


def test_rerun_changes_nothing_and_writes_nothing(split, kubectl):
    before = writes(kubectl)
    proc = run_playbook("site.yml")
    assert all(r["changed"] == 0 for r in recap(proc.stdout).values()), recap(proc.stdout)
    assert writes(kubectl) == before
    # the labels task is skipped on the read alone (filter apply_needed): no module execution for it
    labels = proc.stdout.split("TASK [gpusplit.k8s.gpu_split_cluster : Label the planned nodes]", 1)[1]
    assert labels.split("\n", 1)[1].split("TASK [", 1)[0].strip() == "skipping: [localhost]", labels[:400]


def test_changing_one_nodes_split_changes_only_its_daemonset(split, kubectl, tmp_path):
    before = {n: d["metadata"]["resourceVersion"] for n, d in plugin_daemonsets(kubectl).items()}

    def edit(hosts):
        hosts["lab-dgx-01"]["gpusplit_split"] = {"host_count": 3}

    inv = inventory_copy(tmp_path, edit)
    # site.yml's verify in check mode reports the node that a real run would change and does not fail
    check = run_playbook("site.yml", inv, "--check", "--diff")
    assert "gpusplit-dp-lab-dgx-01" in check.stdout  # the diff names it
    assert "check mode: nothing was applied" in check.stdout
    assert "TASK [gpusplit.k8s.gpu_verify : Fail when a node's split does not hold]" not in check.stdout or (
        "skipping: [localhost]" in check.stdout.split("Fail when a node's split does not hold]", 1)[1][:300]
    )
    assert (
        plugin_daemonsets(kubectl)["gpusplit-dp-lab-dgx-01"]["metadata"]["resourceVersion"]
        == before["gpusplit-dp-lab-dgx-01"]
    )

    run_playbook("site.yml", inv)
    after = {n: d["metadata"]["resourceVersion"] for n, d in plugin_daemonsets(kubectl).items()}
    assert [n for n in before if before[n] != after[n]] == ["gpusplit-dp-lab-dgx-01"]
    node = kubectl.json("get", "node", "lab-dgx-01")
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "5"
    assert node["metadata"]["labels"]["gpusplit.io/host-gpus"] == "3"


def test_removed_host_has_its_daemonset_pruned(split, kubectl, tmp_path):
    inv = inventory_copy(tmp_path, lambda hosts: hosts.pop("lab-h200-01"))
    run_playbook("split.yml", inv)
    assert "gpusplit-dp-lab-h200-01" not in plugin_daemonsets(kubectl)
    assert "gpusplit-dp-lab-dgx-01" in plugin_daemonsets(kubectl)
    # the node of the removed host loses gpusplit's labels and annotation; the lab's own label stays
    meta = kubectl.json("get", "node", "lab-h200-01")["metadata"]
    assert not [
        k for k in meta.get("labels", {}) if k.startswith("gpusplit.io/") and k != "gpusplit.io/lab-fixture"
    ]
    assert "gpusplit.io/host" not in (meta.get("annotations") or {})
    assert meta["labels"]["gpusplit.io/lab-fixture"] == "h200"
    assert kubectl.json("get", "node", "lab-dgx-01")["metadata"]["labels"]["gpusplit.io/split"] == "true"
    kubectl.wait_for(
        lambda: kubectl.json("get", "node", "lab-h200-01")["status"]["allocatable"]["nvidia.com/gpu"] == "0",
        what="the pruned node to stop advertising",
    )


def test_limit_leaves_the_daemonsets_of_hosts_outside_the_run_alone(split, kubectl, tmp_path):
    """--limit (or an unreachable host) plans fewer hosts: the others' plugins must not be pruned."""
    run_playbook("site.yml")  # every node as the inventory says again
    before = {n: d["metadata"]["resourceVersion"] for n, d in plugin_daemonsets(kubectl).items()}
    assert len(before) == 5  # lab-dgx-01, lab-h200-01, lab-hgx-lost-01, lab-ssh-01, lab-ws-01

    def edit(hosts):
        hosts["lab-ws-01"]["gpusplit_split"] = {"host_count": 0}

    try:
        proc = run_playbook("split.yml", inventory_copy(tmp_path, edit), "--limit", "lab-ws-01,localhost")
        after = {n: d["metadata"]["resourceVersion"] for n, d in plugin_daemonsets(kubectl).items()}
        assert sorted(after) == sorted(before)
        assert [n for n in before if before[n] != after[n]] == ["gpusplit-dp-lab-ws-01"]
        text = " ".join(proc.stdout.split())
        assert "inventory host(s) not planned in this run" in text
        assert "lab-dgx-01" in text.split("not planned in this run", 1)[1]
        kubectl.wait_for(
            lambda: (
                kubectl.json("get", "node", "lab-ws-01")["status"]["allocatable"]["nvidia.com/gpu"] == "2"
            ),
            what="lab-ws-01 to advertise both GPUs",
        )
        assert kubectl.json("get", "node", "lab-dgx-01")["status"]["allocatable"]["nvidia.com/gpu"] == "6"
    finally:
        run_playbook("site.yml")  # lab-ws-01 back to its inventory split for the tests after this one
        kubectl.wait_for(
            lambda: (
                kubectl.json("get", "node", "lab-ws-01")["status"]["allocatable"]["nvidia.com/gpu"] == "1"
            ),
            what="lab-ws-01 back to one Kubernetes GPU",
        )


def test_bad_split_is_refused_before_anything_changes(split, kubectl, tmp_path):
    before = {n: d["metadata"]["resourceVersion"] for n, d in plugin_daemonsets(kubectl).items()}

    def edit(hosts):
        hosts["lab-dgx-01"]["gpusplit_split"] = {"count": 9}
        hosts["lab-ws-01"]["gpusplit_split"] = {"uuids": ["GPU-00000000-0000-0000-0000-000000000000"]}

    proc = run_playbook("site.yml", inventory_copy(tmp_path, edit), check=False)
    assert proc.returncode != 0
    assert "lab-dgx-01" in proc.stdout and "9" in proc.stdout
    assert "lab-ws-01" in proc.stdout and "GPU-00000000-0000-0000-0000-000000000000" in proc.stdout
    after = {n: d["metadata"]["resourceVersion"] for n, d in plugin_daemonsets(kubectl).items()}
    assert after == before


def test_gpu_pod_beyond_the_share_stays_pending(split, kubectl):
    ns = f"split-{uuid.uuid4().hex[:6]}"
    kubectl.namespace(ns)
    try:
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "too-big", "namespace": ns},
            "spec": {
                "nodeSelector": {"kubernetes.io/hostname": "lab-ws-01"},
                "containers": [
                    {"name": "c", "image": "cuda", "resources": {"limits": {"nvidia.com/gpu": "2"}}}
                ],
            },
        }
        kubectl("apply", "-f", "-", stdin=json.dumps(pod))
        msg = kubectl.wait_for(
            lambda: next(
                (
                    c.get("message")
                    for c in kubectl.json("-n", ns, "get", "pod", "too-big")
                    .get("status", {})
                    .get("conditions", [])
                    if c["type"] == "PodScheduled"
                ),
                None,
            ),
            what="PodScheduled message",
        )
        assert "Insufficient nvidia.com/gpu" in msg
    finally:
        kubectl("delete", "namespace", ns, "--wait=false")


def test_verify_catches_a_privileged_plugin_and_apply_refuses_it(split, kubectl):
    """The GPU Operator's plugin runs privileged: it advertises every GPU (gpu-operator#1388)."""
    ds = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "nvidia-device-plugin-daemonset", "namespace": "default"},
        "spec": {
            "selector": {"matchLabels": {"name": "stock-dp"}},
            "template": {
                "metadata": {"labels": {"name": "stock-dp"}},
                "spec": {
                    "nodeSelector": {"kubernetes.io/hostname": "lab-dgx-01"},
                    "containers": [
                        {
                            "name": "nvidia-device-plugin-ctr",
                            "image": "nvcr.io/nvidia/k8s-device-plugin:v0.20.0",
                            "securityContext": {"privileged": True},
                        }
                    ],
                },
            },
        },
    }
    kubectl("apply", "-f", "-", stdin=json.dumps(ds))
    try:
        kubectl.wait_for(
            lambda: (
                kubectl.json("get", "node", "lab-dgx-01")["status"]["allocatable"]["nvidia.com/gpu"] == "8"
            ),
            what="the privileged plugin to advertise all 8",
        )
        (C.OUT / "fleet.svg").unlink(missing_ok=True)  # verify.yml must draw it again
        proc = run_playbook("verify.yml", check=False)
        assert proc.returncode != 0
        report = json.loads((C.OUT / "fleet-report.json").read_text())
        assert_fleet_picture(proc.stdout, report)  # drawn before the play fails on the verdict
        dgx = next(n for n in report["nodes"] if n["name"] == "lab-dgx-01")
        assert dgx["verdict"] == "FAIL"
        assert any("advertises 8" in r for r in dgx["reasons"]) and any(
            "2 device plugins" in r for r in dgx["reasons"]
        )

        refused = run_playbook("split.yml", check=False)
        assert refused.returncode != 0
        assert (
            "default/nvidia-device-plugin-daemonset" in refused.stdout
            and "Nothing was changed" in refused.stdout
        )

        run_playbook("site.yml", INVENTORY, "-e", "gpusplit_stock_plugin_action=exclude")
        live = kubectl.json("-n", "default", "get", "daemonset", "nvidia-device-plugin-daemonset")
        terms = live["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]["nodeSelectorTerms"]
        assert {"key": "gpusplit.io/split", "operator": "NotIn", "values": ["true"]} in terms[0][
            "matchExpressions"
        ]
        report = json.loads((C.OUT / "fleet-report.json").read_text())
        assert report["counts"]["FAIL"] == 0, report
    finally:
        kubectl(
            "-n", "default", "delete", "daemonset", "nvidia-device-plugin-daemonset", "--ignore-not-found"
        )


GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
TAINT_MARK = "gpusplit.io/gpu-taint"
SHARED_NODES = ("lab-dgx-01", "lab-h200-01", "lab-hgx-lost-01", "lab-ssh-01", "lab-ws-01")


def gpu_tainted(kubectl, name: str) -> tuple[bool, bool]:
    """(the node has the GPU taint, the node carries gpusplit's mark that gpusplit set it)."""
    node = kubectl.json("get", "node", name)
    return (
        GPU_TAINT in (node["spec"].get("taints") or []),
        TAINT_MARK in (node["metadata"].get("annotations") or {}),
    )


def untainted_by_gpusplit(stdout: str) -> list[str]:
    """The nodes whose GPU taint the role's node_taints task took off (or would, in check mode), from its
    diff (the playbook run with --diff)."""
    section = stdout.split("TASK [gpusplit.k8s.gpu_split_cluster : Set the GPU taint", 1)[1]
    section = section.split("TASK [", 1)[0].split("PLAY RECAP", 1)[0]
    out = []
    for block in re.split(r"^--- before: ", section, flags=re.M)[1:]:
        name = re.match(r"node (\S+) taints", block).group(1)
        if re.search(r"^-nvidia\.com/gpu=present:NoSchedule$", block, flags=re.M):
            out.append(name)
    return sorted(out)


def test_optional_gpu_taint_on_nodes_with_a_kubernetes_share(split, kubectl, tmp_path):
    """gpusplit sets the taint where a node has a Kubernetes share, and takes off only what it set."""
    try:
        # a taint someone else set on a node without a share (mode none): never gpusplit's to remove
        kubectl("taint", "node", "lab-a100-01", "nvidia.com/gpu=present:NoSchedule")
        run_playbook("split.yml", INVENTORY, "-e", "gpusplit_gpu_taint=true")
        for name in SHARED_NODES:
            assert gpu_tainted(kubectl, name) == (True, True), name
        assert gpu_tainted(kubectl, "lab-a100-01") == (True, False)
        again = run_playbook("split.yml", INVENTORY, "-e", "gpusplit_gpu_taint=true")
        assert all(r["changed"] == 0 for r in recap(again.stdout).values()), recap(again.stdout)

        # lab-ws-01's Kubernetes share drops to 0: gpusplit takes its taint off, the others keep theirs
        def edit(hosts):
            hosts["lab-ws-01"]["gpusplit_split"] = {"count": 0}

        run_playbook("split.yml", inventory_copy(tmp_path, edit), "-e", "gpusplit_gpu_taint=true")
        assert gpu_tainted(kubectl, "lab-ws-01") == (False, False)
        assert gpu_tainted(kubectl, "lab-dgx-01") == (True, True)

        # the taint switched off (the default): gpusplit takes it off every node where it set it
        check = run_playbook("split.yml", INVENTORY, "--check", "--diff")
        assert gpu_tainted(kubectl, "lab-dgx-01") == (True, True)  # check mode changed nothing
        assert untainted_by_gpusplit(check.stdout) == [
            "lab-dgx-01",
            "lab-h200-01",
            "lab-hgx-lost-01",
            "lab-ssh-01",
        ]
        off = run_playbook("split.yml", INVENTORY, "--diff")
        assert untainted_by_gpusplit(off.stdout) == [
            "lab-dgx-01",
            "lab-h200-01",
            "lab-hgx-lost-01",
            "lab-ssh-01",
        ]
        for name in SHARED_NODES:
            assert gpu_tainted(kubectl, name) == (False, False), name
        assert gpu_tainted(kubectl, "lab-a100-01") == (True, False)  # the other one's taint stays
        quiet = run_playbook("split.yml", INVENTORY)
        assert all(r["changed"] == 0 for r in recap(quiet.stdout).values()), recap(quiet.stdout)
    finally:
        for name in (*SHARED_NODES, "lab-a100-01"):
            kubectl("taint", "node", name, "nvidia.com/gpu=present:NoSchedule-", check=False)
