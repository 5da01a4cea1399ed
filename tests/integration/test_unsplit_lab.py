"""Taking a split back on the lab (playbooks/unsplit.yml, docs/undo.md), mode device_plugin.

Real kube-apiserver, scheduler and controller-manager; kwok kubelets (kubeletVersion v1.37.2-lab: the hand-over
with the stock plugin first), lab.deviceplugin for what the plugins advertise (the plugin that registered last
wins, as on a kubelet with the fix of kubernetes#121994) and lab.podresources for who holds each GPU. The host's
files are the lab host's scratch root, seeded with the toolkit's stock config.toml.
"""

from __future__ import annotations

import json
import re
import shutil
import threading
import time
import uuid
from pathlib import Path

import ansible_output
import pytest
import real_charts
from ansible_output import ansible_playbook
from test_feature_gates_rollout import (  # the rollout's helpers and its control_plane fixture
    API,
    COMPONENTS,
    GATE,
    cluster_configuration,
    control_plane,  # noqa: F401 (a fixture)
    gate_values,
    generations,
    manifest_bytes,
    recap,
    run_playbook,
    served,
)
from test_gpu_operator_chart import NS as OPERATOR_NS
from test_gpu_operator_chart import RELEASE as OPERATOR_RELEASE
from test_gpu_operator_chart import operator as operator_chart  # noqa: F401 (the real chart, installed by gpusplit)
from test_gpu_operator_chart import play as operator_play

from ansible_collections.gpusplit.k8s.plugins.module_utils._kubelet import pod_resources as pr
from ansible_collections.gpusplit.k8s.plugins.plugin_utils import gpu_operator, unsplit_cluster
from lab import components as C
from lab import podresources as ps

ROOT = Path(__file__).resolve().parents[2]
INVENTORY = ROOT / "inventory" / "lab"
NODE = "lab-dgx-01"
HOSTS = ("-e", f"gpusplit_hosts={NODE}")
STOCK_CONFIG = ROOT / "tests" / "fixtures" / "nvidia-container-toolkit" / "config.toml"
PLUGIN_SELECTOR = "app.kubernetes.io/managed-by=gpusplit,app.kubernetes.io/name=gpusplit-device-plugin"

pytestmark = pytest.mark.integration


def run(playbook, *extra, ok=True):
    proc = ansible_playbook(playbook, INVENTORY, *HOSTS, *extra)
    if ok is True and proc.returncode != 0:
        raise AssertionError(f"{playbook} failed:\n{proc.stdout[-6000:]}\n{proc.stderr[-2000:]}")
    if ok is False and proc.returncode == 0:
        raise AssertionError(f"{playbook} should have failed:\n{proc.stdout[-6000:]}")
    return proc


def changed(proc) -> dict[str, int]:
    """{host: changed} of the run's recap."""
    return {host: counts["changed"] for host, counts in ansible_output.recap(proc.stdout).items()}


def changed_tasks(proc) -> set[str]:
    """The names of the tasks that reported a change (on any host)."""
    return {task.split(" -> ")[0] for task in ansible_output.changed_tasks(proc.stdout)}


def host_root() -> Path:
    return C.HOSTS_ROOT / NODE


def host_files(backups: bool = False) -> dict[str, bytes]:
    """Every file under the lab host's etc/ (the toolkit's folder, gpusplit's, systemd's), by relative path;
    gpusplit's backups (which an unsplit leaves) only with ``backups``."""
    etc = host_root() / "etc"
    return {
        str(p.relative_to(etc)): p.read_bytes()
        for p in sorted(etc.rglob("*"))
        if p.is_file() and (backups or not re.search(r"\.gpusplit-[0-9TZ.]+\.bak$", p.name))
    }


def pristine_host():
    """The lab host as before any split: the toolkit's stock config.toml, nothing of gpusplit's."""
    etc = host_root() / "etc"
    for folder in (etc / "gpusplit", etc / "systemd"):
        shutil.rmtree(folder, ignore_errors=True)
    toolkit = etc / "nvidia-container-runtime"
    toolkit.mkdir(parents=True, exist_ok=True)
    for backup in toolkit.glob("config.toml.gpusplit-*"):
        backup.unlink()
    (toolkit / "config.toml").write_bytes(STOCK_CONFIG.read_bytes())


def node(kubectl) -> dict:
    return kubectl.json("get", "node", NODE)


def allocatable(kubectl) -> int:
    return int(node(kubectl)["status"]["allocatable"].get("nvidia.com/gpu", "0"))


def split_daemonsets(kubectl) -> list:
    return [
        d
        for d in kubectl.json("get", "daemonsets", "-A", "-l", PLUGIN_SELECTOR)["items"]
        if d["metadata"]["annotations"].get("gpusplit.io/node-name") == NODE
    ]


def gpusplit_labels(kubectl) -> dict:
    labels = node(kubectl)["metadata"]["labels"]
    return {
        k: v for k, v in labels.items() if k.startswith("gpusplit.io/") and k != "gpusplit.io/lab-fixture"
    }


STOCK = {
    "apiVersion": "apps/v1",
    "kind": "DaemonSet",
    "metadata": {"name": "unsplit-stock-plugin", "namespace": "kube-system"},
    "spec": {
        "selector": {"matchLabels": {"app": "unsplit-stock-plugin"}},
        "template": {
            "metadata": {"labels": {"app": "unsplit-stock-plugin"}},
            "spec": {
                # the stock plugin of this node only, kept off split nodes as gpusplit's exclusion does
                "nodeSelector": {"kubernetes.io/hostname": NODE},
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {
                                    "matchExpressions": [
                                        {"key": "gpusplit.io/split", "operator": "NotIn", "values": ["true"]}
                                    ]
                                }
                            ]
                        }
                    }
                },
                "tolerations": [{"operator": "Exists"}],
                "containers": [
                    {"name": "nvidia-device-plugin-ctr", "image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"}
                ],
            },
        },
    },
}


def stock_pods(kubectl) -> list:
    return [
        p
        for p in kubectl.json("-n", "kube-system", "get", "pods", "-l", "app=unsplit-stock-plugin")["items"]
        if p["spec"].get("nodeName") == NODE and p["status"].get("phase") == "Running"
    ]


@pytest.fixture
def split_node(lab, kubectl):
    """lab-dgx-01 split as the inventory says (2 GPUs to the host, 6 to Kubernetes) from a pristine host;
    yields the host's files as they were before the split. Afterwards: split again, host and stock plugin reset."""
    kubectl("delete", "daemonset", "-n", "kube-system", "unsplit-stock-plugin", "--wait=true", check=False)
    try:  # the split and the stock plugin are taken back even when this setup fails half-way
        pristine_host()
        before = host_files()
        run("site.yml")
        assert allocatable(kubectl) == 6 or kubectl.wait_for(lambda: allocatable(kubectl) == 6, what="6 GPUs")
        yield before
    finally:
        kubectl(
            "delete", "daemonset", "-n", "kube-system", "unsplit-stock-plugin", "--wait=true", check=False
        )
        pristine_host()
        run("site.yml", "-e", "gpusplit_resplit_policy=evict")


def test_a_missing_or_unknown_target_is_refused_before_anything(lab, kubectl):
    proc = run("unsplit.yml", ok=False)
    assert "gpusplit_unsplit_to is required" in proc.stdout
    assert "Discover" not in proc.stdout.split("gpusplit_unsplit_to is required", 1)[0].split("PLAY [")[-1]
    assert (
        "gpusplit_unsplit_to: 'somewhere'"
        in run("unsplit.yml", "-e", "gpusplit_unsplit_to=somewhere", ok=False).stdout
    )


def test_to_kubernetes_without_a_stock_plugin_is_refused_and_nothing_changes(split_node, kubectl):
    files = host_files()
    proc = run("unsplit.yml", "-e", "gpusplit_unsplit_to=kubernetes", ok=False)
    assert "gpusplit_unsplit_plugin=none" in proc.stdout and "Nothing was changed" in proc.stdout
    assert split_daemonsets(kubectl) and gpusplit_labels(kubectl)["gpusplit.io/split"] == "true"
    assert host_files() == files


def test_to_kubernetes_hands_over_to_the_stock_plugin_split_plugin_first(split_node, kubectl):
    kubectl("apply", "-f", "-", stdin=json.dumps(STOCK))
    assert not stock_pods(kubectl)  # kept off the split node
    files = host_files()
    # a host process on a GPU that goes back to Kubernetes stops the run, as in a re-split (the lab inventory
    # lets the fixtures' frozen processes through: refuse is asked for here); nothing changes
    refused = run(
        "unsplit.yml",
        "-e",
        "gpusplit_unsplit_to=kubernetes",
        "-e",
        "gpusplit_resplit_host_processes=refuse",
        ok=False,
    )
    said = " ".join(refused.stdout.split())
    assert "pid 2841 (/usr/bin/python3) on GPU 0" in said and "Nothing was changed" in said, said[-3000:]
    assert split_daemonsets(kubectl) and allocatable(kubectl) == 6 and not stock_pods(kubectl)
    assert gpusplit_labels(kubectl)["gpusplit.io/split"] == "true" and host_files() == files
    check = run("unsplit.yml", "-e", "gpusplit_unsplit_to=kubernetes", "--check")
    assert "every healthy GPU (8) back to kube-system/unsplit-stock-plugin" in check.stdout
    said = " ".join(check.stdout.split())
    assert "the split plugin goes first, the gap until the stock plugin registers is measured" in said, said[
        -3000:
    ]
    assert split_daemonsets(kubectl) and allocatable(kubectl) == 6

    seen, stop = [], threading.Event()

    def watch():
        while not stop.is_set():
            seen.append((allocatable(kubectl), bool(split_daemonsets(kubectl)), bool(stock_pods(kubectl))))
            time.sleep(0.3)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        proc = run("unsplit.yml", "-e", "gpusplit_unsplit_to=kubernetes")
    finally:
        stop.set()
        watcher.join()
    # two plugins of one resource share one socket on a node: never both at once, and the gap is reported
    assert not any(split and stock for _, split, stock in seen), seen
    text = " ".join(proc.stdout.split())
    assert re.search(r"gap on lab-dgx-01 .*about [0-9.]+s until the stock plugin advertised the GPUs", text)
    assert allocatable(kubectl) == 8
    assert stock_pods(kubectl) and not split_daemonsets(kubectl) and gpusplit_labels(kubectl) == {}
    # byte-identical: config.toml put back from gpusplit's backup, its env file and record gone; the backup stays
    assert host_files() == split_node
    assert any(name.endswith(".bak") for name in host_files(backups=True))
    # a re-run changes nothing on the host or in the cluster; it writes out/resplit-diff.json once more, which
    # now says that nothing moves; the run after it is changed=0
    again = run("unsplit.yml", "-e", "gpusplit_unsplit_to=kubernetes")
    assert changed_tasks(again) <= {"gpusplit.k8s.gpu_resplit : Write the plan diff (on the controller)"}
    assert changed(run("unsplit.yml", "-e", "gpusplit_unsplit_to=kubernetes")) == {NODE: 0, "localhost": 0}


def kubelet_version(kubectl, version: str):
    """The node's reported kubelet version (kwok posts its own again at the node's next full status)."""
    kubectl(
        "patch",
        "node",
        NODE,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": {"nodeInfo": {"kubeletVersion": version}}}),
    )


def test_to_kubernetes_on_an_older_kubelet_the_split_plugin_goes_first_and_the_gap_is_reported(
    split_node, kubectl
):
    kubectl("apply", "-f", "-", stdin=json.dumps(STOCK))
    reported = node(kubectl)["status"]["nodeInfo"]["kubeletVersion"]
    kubelet_version(kubectl, "v1.36.3-lab")
    seen, stop = [], threading.Event()

    def watch():
        while not stop.is_set():
            seen.append((allocatable(kubectl), bool(split_daemonsets(kubectl)), bool(stock_pods(kubectl))))
            time.sleep(0.3)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        proc = run("unsplit.yml", "-e", "gpusplit_unsplit_to=kubernetes")
    finally:
        stop.set()
        watcher.join()
        kubelet_version(kubectl, reported)
    text = " ".join(proc.stdout.split())
    assert "the split plugin goes first, the gap until the stock plugin registers is measured" in text
    assert re.search(r"gap on lab-dgx-01 .*about [0-9.]+s until the stock plugin advertised the GPUs", text)
    # never two plugins on the node at once: the stock plugin's pod ran only after the split DaemonSet was gone
    assert not any(split and stock for _, split, stock in seen), seen
    assert allocatable(kubectl) == 8 and stock_pods(kubectl) and gpusplit_labels(kubectl) == {}
    assert host_files() == split_node


def test_to_host_refuses_under_refuse_and_evicts_exactly_the_pod_under_evict(split_node, kubectl):
    ns = f"unsplit-{uuid.uuid4().hex[:6]}"
    kubectl.namespace(ns)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "train-0", "namespace": ns},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": NODE},
            "containers": [{"name": "c", "image": "cuda", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
        },
    }
    other = {
        **pod,
        "metadata": {"name": "cpu-0", "namespace": ns},
        "spec": {**pod["spec"], "containers": [{"name": "c", "image": "busybox"}]},
    }
    try:
        for obj in (pod, other):
            kubectl("apply", "-f", "-", stdin=json.dumps(obj))
        kubectl.wait_for(
            lambda: kubectl.json("-n", ns, "get", "pod", "train-0")["status"].get("phase") == "Running",
            timeout=90,
            what="the GPU pod running",
        )
        # the unsplit learns who holds a GPU from the node's pod-resources answer: wait until it lists the pod
        socket = str(ps.socket_path(NODE))
        kubectl.wait_for(
            lambda: (
                Path(socket).exists()
                and any(
                    h["namespace"] == ns and h["pod"] == "train-0" and h["resource_name"] == "nvidia.com/gpu"
                    for h in pr.read_pod_resources(socket)["holders"]
                )
            ),
            timeout=90,
            what="train-0's GPU in the node's pod-resources answer",
        )
        files = host_files()
        refused = run("unsplit.yml", "-e", "gpusplit_unsplit_to=host", ok=False)
        assert f"{ns}/train-0 holds GPU" in refused.stdout and "Nothing was changed" in refused.stdout
        assert split_daemonsets(kubectl) and allocatable(kubectl) == 6 and host_files() == files

        run("unsplit.yml", "-e", "gpusplit_unsplit_to=host", "-e", "gpusplit_resplit_policy=evict")
        left = {p["metadata"]["name"] for p in kubectl.json("-n", ns, "get", "pods")["items"]}
        assert left == {"cpu-0"}
        assert allocatable(kubectl) == 0 and not split_daemonsets(kubectl)
        # the label that keeps other device plugins off stays; gpusplit's other labels go
        assert gpusplit_labels(kubectl) == {"gpusplit.io/split": "true"}
        assert host_files() == split_node
        out = json.loads((C.OUT / "resplit-diff.json").read_text())
        assert out["holders"] == [] or all(h["name"] == "train-0" for h in out["holders"])
    finally:
        kubectl("delete", "namespace", ns, "--wait=false", check=False)


def test_keep_leaves_the_hardening_and_says_so(split_node, kubectl):
    hardened = host_files()["nvidia-container-runtime/config.toml"]
    proc = run("unsplit.yml", "-e", "gpusplit_unsplit_to=host", "-e", "gpusplit_unsplit_host_files=keep")
    assert "hardening stays (gpusplit_unsplit_host_files=keep)" in " ".join(proc.stdout.split())
    files = host_files()
    assert files["nvidia-container-runtime/config.toml"] == hardened
    assert "gpusplit/host-gpus.env" not in files and "gpusplit/host-state.json" in files


# --------------------------------------------------------------------------------------------
# the whole cluster: gpusplit_unsplit_cluster=true on the last run

OTHER = "lab-ws-01"
GUARD_SELECTOR = "app.kubernetes.io/managed-by=gpusplit,gpusplit.io/guard"


def guard_objects(kubectl) -> list[str]:
    return sorted(
        f"{kind}/{o['metadata']['name']}"
        for kind in ("validatingadmissionpolicies", "validatingadmissionpolicybindings")
        for o in kubectl.json("get", kind, "-l", GUARD_SELECTOR)["items"]
    )


def plugin_of(kubectl, name: str) -> list:
    return [
        d
        for d in kubectl.json("get", "daemonsets", "-A", "-l", PLUGIN_SELECTOR)["items"]
        if d["metadata"]["annotations"].get("gpusplit.io/node-name") == name
    ]


def split_nodes(kubectl) -> set[str]:
    """The lab nodes gpusplit has split (its label, or a split plugin of its own)."""
    labelled = {
        n["metadata"]["name"] for n in kubectl.json("get", "nodes", "-l", "gpusplit.io/split")["items"]
    }
    plugins = {
        d["metadata"]["annotations"].get("gpusplit.io/node-name")
        for d in kubectl.json("get", "daemonsets", "-A", "-l", PLUGIN_SELECTOR)["items"]
    }
    return labelled | (plugins - {None})


LOOK_ALIKE = {
    "apiVersion": "admissionregistration.k8s.io/v1",
    "kind": "ValidatingAdmissionPolicy",
    "metadata": {"name": "gpusplit-look-alike"},
    "spec": {
        "matchConstraints": {
            "resourceRules": [
                {
                    "apiGroups": [""],
                    "apiVersions": ["v1"],
                    "operations": ["CREATE"],
                    "resources": ["configmaps"],
                }
            ]
        },
        "validations": [{"expression": "true"}],
    },
}


SHARING_CLASS = "gpusplit-time-slicing-short"
SHARING_LABELS = {"app.kubernetes.io/managed-by": "gpusplit", "app.kubernetes.io/name": "gpusplit-sharing"}


def device_class(name: str, labels: dict) -> dict:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name, "labels": labels},
        "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}]},
    }


def test_the_whole_cluster_is_refused_while_a_node_outside_the_play_is_split_then_goes_with_the_last(
    split_node, kubectl
):
    guard_before = guard_objects(kubectl)
    split_before = split_nodes(kubectl) - {NODE}
    try:
        run("site.yml", "-e", f"gpusplit_hosts={OTHER}")
        run("guard.yml")
        kubectl("apply", "-f", "-", stdin=json.dumps(LOOK_ALIKE))
        guarded = guard_objects(kubectl)
        assert guarded and plugin_of(kubectl, OTHER)

        wide = ("-e", "gpusplit_unsplit_to=host", "-e", "gpusplit_unsplit_cluster=true")
        refused = run("unsplit.yml", *wide, ok=False)
        said = " ".join(refused.stdout.split())
        assert f"{OTHER} (gpusplit's labels" in said and "add them to gpusplit_hosts" in said, said[-3000:]
        assert "Nothing was changed" in said
        assert guard_objects(kubectl) == guarded and split_daemonsets(kubectl) and plugin_of(kubectl, OTHER)

        # the last run: every node gpusplit still splits is in the play
        every = ("-e", "gpusplit_hosts=" + ",".join(sorted(split_nodes(kubectl))))
        check = " ".join(run("unsplit.yml", *wide, *every, "--check").stdout.split())
        assert "whole cluster: admission policies gpusplit-" in check, check[-5000:]
        # (the output doubles the apostrophe of "gpusplit's")
        look_alike = "(no app.kubernetes.io/managed-by=gpusplit label), left: ValidatingAdmissionPolicy gpusplit-look-alike"
        assert look_alike in check, check[-5000:]
        assert guard_objects(kubectl) == guarded and split_daemonsets(kubectl)

        # a time-sliced DeviceClass as dra.yml writes it (gpusplit's labels), and one of someone else's
        for name, labels in ((SHARING_CLASS, SHARING_LABELS), (f"{SHARING_CLASS}-not-ours", {})):
            kubectl("apply", "-f", "-", stdin=json.dumps(device_class(name, labels)))
        proc = run("unsplit.yml", *wide, *every)
        text = " ".join(proc.stdout.split())
        assert "whole cluster, removed: " in text and "whole cluster, removed: nothing" not in text
        classes = {c["metadata"]["name"] for c in kubectl.json("get", "deviceclasses")["items"]}
        assert SHARING_CLASS not in classes and f"{SHARING_CLASS}-not-ours" in classes, classes
        assert (
            guard_objects(kubectl) == [] and not split_daemonsets(kubectl) and not plugin_of(kubectl, OTHER)
        )
        assert kubectl.json(
            "get", "validatingadmissionpolicy", LOOK_ALIKE["metadata"]["name"]
        )  # not gpusplit's
        assert allocatable(kubectl) == 0
        # a re-run changes nothing but out/resplit-diff.json, once
        again = run("unsplit.yml", *wide, *every)
        assert changed_tasks(again) <= {"gpusplit.k8s.gpu_resplit : Write the plan diff (on the controller)"}
    finally:
        kubectl("delete", "validatingadmissionpolicy", LOOK_ALIKE["metadata"]["name"], check=False)
        kubectl(
            "delete",
            "deviceclass",
            SHARING_CLASS,
            f"{SHARING_CLASS}-not-ours",
            "--ignore-not-found",
            check=False,
        )
        run("guard.yml", "-e", f"gpusplit_guard_state={'present' if guard_before else 'absent'}")
        if split_before:  # split again as the lab had them
            run("site.yml", "-e", "gpusplit_hosts=" + ",".join(sorted(split_before)), ok=None)
        for name in {OTHER} - split_before:  # as the lab had it: not split, no label of gpusplit's
            run("unsplit.yml", "-e", "gpusplit_unsplit_to=host", "-e", f"gpusplit_hosts={name}", ok=None)
            kubectl("label", "node", name, "gpusplit.io/split-", check=False)


# --------------------------------------------------------------------------------------------
# feature gates back: playbooks/feature_gates.yml with a gate set to absent, on the lab's real control plane


def test_a_gate_set_to_absent_leaves_the_manifests_as_before_it_was_added(control_plane, kubectl):  # noqa: F811
    manifests = manifest_bytes()
    config = cluster_configuration(kubectl)
    rc, out, _ = run_playbook({"gpusplit_feature_gates": {GATE: True}})
    assert rc == 0, out[-6000:]
    assert API in served(kubectl) and manifest_bytes() != manifests

    ns = f"unsplit-gate-{uuid.uuid4().hex[:6]}"
    kubectl.namespace(ns)
    group = {
        "apiVersion": API,
        "kind": "PodGroup",
        "metadata": {"name": "pg-1", "namespace": ns},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}},
    }
    kubectl("apply", "-f", "-", stdin=json.dumps(group))
    try:
        enabled = manifest_bytes()
        gens = generations()
        rc, out, _ = run_playbook({"gpusplit_feature_gates": {GATE: "absent"}})
        assert rc != 0
        assert f"PodGroup {ns}/pg-1" in " ".join(out.split()) and "Nothing was changed" in out
        assert manifest_bytes() == enabled and generations() == gens
    finally:
        kubectl("delete", "namespace", ns, "--wait=true", check=False)

    rc, out, _ = run_playbook({"gpusplit_feature_gates": {GATE: "absent"}})
    assert rc == 0, out[-6000:]
    # the gate and its --runtime-config entry are out again: the manifests are byte for byte as before the gate
    # was added, each component restarted once, the API is no longer served and the gate is off everywhere
    assert manifest_bytes() == manifests
    assert generations() == {c: n + 1 for c, n in gens.items()}
    assert API not in served(kubectl)
    assert {c: v["gate"] for c, v in gate_values().items()} == dict.fromkeys(COMPONENTS, 0.0)
    assert cluster_configuration(kubectl) == config
    rc, out, _ = run_playbook({"gpusplit_feature_gates": {GATE: "absent"}})
    assert rc == 0 and recap(out)["changed"] == 0, out[-4000:]
    assert generations() == {c: n + 1 for c, n in gens.items()}


# ---------------------------------------------------------------------------------------------
# the GPU Operator's release gpusplit installed itself (gpu_operator.yml on a cluster without one)


def test_the_operator_release_gpusplit_installed_is_named_in_the_clusterpolicy_and_proven_its_own(
    operator_chart,  # noqa: F811 (the fixture)
    kubectl,
):
    operator_play(kubectl, operator_chart)  # no ClusterPolicy before: gpusplit installs the real chart
    [cp] = kubectl.json("get", "clusterpolicies")["items"]
    record = json.loads(cp["metadata"]["annotations"][gpu_operator.ANNOTATION_ORIGINAL])
    assert record[gpu_operator.RECORD_INSTALLED] == {"namespace": OPERATOR_NS, "release": OPERATOR_RELEASE}
    assert "toolkit.env" in record  # the fields' record beside it
    # the re-run (helm runs again over the ClusterPolicy that is there now) keeps the mark and writes nothing
    version = cp["metadata"]["resourceVersion"]
    again = operator_play(kubectl, operator_chart)
    assert ansible_output.recap(again.stdout)["localhost"]["changed"] == 0, again.stdout[-5000:]
    [cp] = kubectl.json("get", "clusterpolicies")["items"]
    assert cp["metadata"]["resourceVersion"] == version
    # what the whole-cluster unsplit decides from the live release and ClusterPolicy: gpusplit's, uninstalled
    # only with gpusplit_unsplit_releases
    [row] = real_charts.releases(OPERATOR_NS)
    info = {"item": {"chart": "operator", "namespace": OPERATOR_NS, "name": OPERATOR_RELEASE}, "status": row}
    listed = unsplit_cluster.releases_plan([info], False, [cp])
    assert (
        listed["uninstall"] == [] and "(GPU Operator, gpusplit's): left: helm uninstall" in listed["lines"][0]
    )
    assert unsplit_cluster.releases_plan([info], True, [cp])["uninstall"] == [
        {"namespace": OPERATOR_NS, "name": OPERATOR_RELEASE}
    ]


# ---------------------------------------------------------------------------------------------
# gpusplit_unsplit_force: the cluster side of a host the run did not reach


def test_force_takes_back_the_cluster_side_of_a_host_the_run_did_not_reach(split_node, kubectl, tmp_path):
    # lab-dgx-01's GPUs cannot be read (its discovery fails: not reached); lab-h200-01 (not split) is in the run
    # too, as a run whose every host fails ends at the discovery
    def unreadable(hosts):
        hosts[NODE]["gpusplit_lab_fixture"] = "no-such-fixture"

    inventory = ansible_output.inventory_copy(tmp_path, unreadable)
    files = host_files()
    args = ("-e", f"gpusplit_hosts={NODE},lab-h200-01", "-e", "gpusplit_unsplit_to=kubernetes")
    args += ("-e", "gpusplit_unsplit_plugin=none")

    left = ansible_playbook("unsplit.yml", inventory, *args)
    said = " ".join(left.stdout.split())
    assert f"{NODE}: not reached (unreachable, or its discovery failed): left as it is" in said, said[-4000:]
    assert split_daemonsets(kubectl) and gpusplit_labels(kubectl)["gpusplit.io/split"] == "true"
    assert host_files() == files

    forced = ansible_playbook("unsplit.yml", inventory, *args, "-e", "gpusplit_unsplit_force=true")
    said = " ".join(forced.stdout.split())
    assert f"host {NODE} not reached, taken back anyway (gpusplit_unsplit_force)" in said, said[-4000:]
    assert "its host files left as they are" in said
    assert changed(forced).get(NODE, 0) == 0  # nothing ran on the host
    assert not split_daemonsets(kubectl) and gpusplit_labels(kubectl) == {}
    assert host_files() == files  # gpusplit's files stay on a host that was not reached
