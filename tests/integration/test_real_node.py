"""The lab's real node lab-node-01 (lab/node.py): a kubelet of the lab's Kubernetes version on
containerd, runc and the CNI plugins, joined to the lab's apiserver; a pod runs on it from the lab's
own images; gpusplit's gpu_pod_resources reads the real kubelet's pod-resources socket; the lab's
device plugin registers with the real kubelet, which allocates its GPUs; a GPU pod starts through the
NVIDIA container runtime and the toolkit's hook; gpusplit's hardening of the toolkit's config.toml
keeps host GPUs from a pod that names them in its env; a pod keeps its GPU when the plugin stops
advertising it (k8s-device-plugin#313) until evicted; site.yml splits the node with gpusplit's own
split DaemonSet, the real kubelet advertising exactly the Kubernetes share; resplit.yml evicts the pod
in the way (evict) or leaves it its GPU across the plugin's restart (wait); unsplit.yml hands the node
back to a stock plugin, the split plugin gone before the stock plugin starts; site.yml takes the node over
from a stock plugin, its pod gone before the split plugin starts, on a kubelet of the lab's release and on a
1.36 kubelet (lab.node.restart_kubelet); and `lab down` leaves no process, mount, cgroup or bridge of it behind.

Where the kubelet cannot run here (a capability, cgroups, a binary missing) these tests fail with
what is missing, as `lab up` recorded it; they are never skipped.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import shutil
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest
from ansible_output import ansible_module, ansible_playbook, changed_tasks

from ansible_collections.gpusplit.k8s.plugins.module_utils._host import toolkit_config as tc
from ansible_collections.gpusplit.k8s.plugins.module_utils._kubelet import pod_resources as pr
from lab import components as C
from lab import lab as labctl
from lab import node

ROOT = Path(__file__).resolve().parents[2]
INVENTORY = ROOT / "inventory" / "lab"


@pytest.fixture(scope="module")
def real_node(lab, kubectl):
    state = node.status()
    if not state["ready"]:
        why = state["error"] or "(lab up recorded no error)"
        pytest.fail(
            f"the real node {node.NAME} is not Ready: {why}\n--- kubelet log ---\n{node.log_tail('kubelet')}",
            pytrace=False,
        )
    return state


@pytest.fixture
def ns(kubectl):
    name = kubectl.namespace(f"node-{uuid.uuid4().hex[:6]}")
    yield name
    kubectl("delete", "namespace", name, "--wait=false", check=False)


def workload_pod(name: str, env: dict[str, str], wait: bool = False) -> dict:
    """A pod of the lab's workload image, for the real node only (its taint tolerated)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node.NAME},
            "tolerations": [{"key": node.TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}],
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 2,
            "containers": [
                {
                    "name": "report",
                    "image": node.WORKLOAD_IMAGE,
                    "imagePullPolicy": "Never",
                    "args": ["wait"] if wait else [],
                    "env": [{"name": k, "value": v} for k, v in env.items()],
                }
            ],
        },
    }


def test_the_real_node_joined_the_lab_with_its_sockets_under_its_root_dir(real_node, kubectl):
    got = kubectl.json("get", "node", node.NAME)
    info = got["status"]["nodeInfo"]
    assert info["kubeletVersion"] == f"v{node.kubelet_release()}"  # the lab's, or GPUSPLIT_LAB_NODE_KUBELET's
    assert info["containerRuntimeVersion"] == f"containerd://{C.versions()['CONTAINERD_VERSION']}"
    assert {"type": "InternalIP", "address": C.HOST} in got["status"]["addresses"]
    assert {"key": node.TAINT_KEY, "value": "true", "effect": "NoSchedule"} in got["spec"]["taints"]
    # not a kwok node: no kwok annotation, no fixture label (lab/deviceplugin.py leaves it alone)
    assert "kwok.x-k8s.io/node" not in got["metadata"].get("annotations", {})
    # the kubelet's sockets where a real node has them, under its own root dir
    for sock in (node.DEVICE_PLUGIN_SOCKET, node.POD_RESOURCES_SOCKET):
        assert sock.is_socket(), sock
        assert sock.is_relative_to(C.HOSTS_ROOT / node.NAME / "var/lib/kubelet"), sock
    proc = Path("/proc", str(real_node["kubelet_pid"]))
    argv = (proc / "cmdline").read_bytes().decode().split("\0")
    assert f"--root-dir={node.NS_KUBELET_DIR}" in argv
    # which, in the node's mount namespace, is the node's own root dir
    seen = (proc / "root" / node.NS_KUBELET_DIR.relative_to("/")).stat()
    assert (seen.st_dev, seen.st_ino) == (node.KUBELET_DIR.stat().st_dev, node.KUBELET_DIR.stat().st_ino)
    # the images were built here and imported: no registry was reached
    images = node.ctr("images", "ls", "-q").stdout.split()
    assert node.PAUSE_IMAGE in images and node.WORKLOAD_IMAGE in images


def test_a_pod_on_the_real_node_prints_its_environment(real_node, kubectl, ns):
    marker = uuid.uuid4().hex
    kubectl("-n", ns, "apply", "-f", "-", stdin=json.dumps(workload_pod("env", {"GPUSPLIT_MARK": marker})))
    kubectl.wait_for(
        lambda: kubectl.json("-n", ns, "get", "pod", "env")["status"].get("phase") in ("Succeeded", "Failed"),
        timeout=120,
        what="the pod on the real node to finish",
    )
    pod = kubectl.json("-n", ns, "get", "pod", "env")
    assert pod["status"]["phase"] == "Succeeded", json.dumps(pod["status"], indent=1)
    assert pod["spec"]["nodeName"] == node.NAME
    # its log through the apiserver, which reads it from the kubelet
    lines = kubectl("-n", ns, "logs", "env").stdout.splitlines()
    assert f"env GPUSPLIT_MARK={marker}" in lines
    assert any(line.startswith("env KUBERNETES_SERVICE_HOST=") for line in lines), lines
    assert lines[-1] == "done"
    # and the kubelet's own log file under the node's root
    logs = list(node.POD_LOGS.glob(f"{ns}_env_*/report/0.log"))
    assert logs and marker in logs[0].read_text()
    # a pod IP of the node's bridge subnet
    assert ipaddress.ip_address(pod["status"]["podIP"]) in node.pod_subnet()


def test_gpu_pod_resources_reads_the_real_kubelets_socket(real_node, kubectl, ns):
    kubectl("-n", ns, "apply", "-f", "-", stdin=json.dumps(workload_pod("holder", {}, wait=True)))
    kubectl.wait_for(
        lambda: kubectl.json("-n", ns, "get", "pod", "holder")["status"].get("phase") == "Running",
        timeout=120,
        what="the pod on the real node to run",
    )
    sock = str(node.POD_RESOURCES_SOCKET)
    # the collection's client, then the module through Ansible as a user runs it
    answer = pr.read_pod_resources(sock)
    pods = {(p["namespace"], p["name"]) for p in answer["pods"]}
    assert (ns, "holder") in pods, answer
    result = ansible_module(
        "localhost", "gpusplit.k8s.gpu_pod_resources", f"socket={sock} timeout=20", INVENTORY
    )
    assert result["socket"] == sock
    assert [h for h in result["holders"] if h["namespace"] == ns] == []  # it holds no device
    kubectl("-n", ns, "delete", "pod", "holder", "--wait=true", "--timeout=60s")
    kubectl.wait_for(
        lambda: (
            (ns, "holder") not in {(p["namespace"], p["name"]) for p in pr.read_pod_resources(sock)["pods"]}
        ),
        timeout=60,
        what="the deleted pod to leave the kubelet's pod-resources answer",
    )


FIXTURE = ROOT / "tests" / "fixtures" / "gpus" / "l40s-pair.json"


def toolkit_config(hardened: bool) -> None:
    """The node's config.toml: the toolkit's stock one, or with gpusplit's edit of it (tc.HARDENING_SETTINGS)."""
    node.write_nvidia_config()
    if hardened:
        text = node.NVIDIA_CONFIG.read_text()
        node.NVIDIA_CONFIG.write_text(tc.edit_config(text, tc.HARDENING_SETTINGS, name="config.toml")["text"])


def plugin_pod(strategy: str, given: list[str]) -> dict:
    """The lab's device plugin on the real node, asking the NVIDIA runtime (the node's default) for
    ``given`` through its NVIDIA_VISIBLE_DEVICES; it advertises the GPU device nodes the runtime made
    in its /dev. As gpusplit renders it: with `volume-mounts` it has CAP_SYS_ADMIN, which a hardened
    toolkit requires of a container whose NVIDIA_VISIBLE_DEVICES it honours (docs/hardening.md, 2.3)."""
    caps = {"drop": ["ALL"], "add": ["SYS_ADMIN"]} if strategy == "volume-mounts" else {"drop": ["ALL"]}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "device-plugin"},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node.NAME},
            "tolerations": [{"key": node.TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}],
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 1,
            "volumes": [
                {
                    "name": "device-plugins",
                    "hostPath": {"path": "/var/lib/kubelet/device-plugins", "type": "Directory"},
                }
            ],
            "containers": [
                {
                    "name": "plugin",
                    "image": node.DEVICE_PLUGIN_IMAGE,
                    "imagePullPolicy": "Never",
                    "env": [
                        {"name": "DEVICE_LIST_STRATEGY", "value": strategy},
                        {"name": "NVIDIA_VISIBLE_DEVICES", "value": ",".join(given)},
                    ],
                    "securityContext": {"privileged": False, "capabilities": caps},
                    "volumeMounts": [
                        {"name": "device-plugins", "mountPath": "/var/lib/kubelet/device-plugins"}
                    ],
                }
            ],
        },
    }


@pytest.mark.parametrize("strategy", ["envvar", "volume-mounts"])
def test_the_lab_device_plugin_registers_with_the_real_kubelet_which_allocates_its_gpu(
    real_node, kubectl, ns, strategy
):
    gpus = json.loads(FIXTURE.read_text())["gpus"]
    given = gpus[1]["uuid"]  # of the fixture's two GPUs, the runtime exposes the second only
    # the volume-mount list needs the toolkit to read it: gpusplit's hardening goes with that strategy
    toolkit_config(hardened=strategy == "volume-mounts")
    kubectl("-n", ns, "apply", "-f", "-", stdin=json.dumps(plugin_pod(strategy, [given])))
    try:
        # registered (the node's allocatable may still show an earlier plugin's until the kubelet's next
        # status update), then the real kubelet sets the node's allocatable from the registration
        kubectl.wait_for(
            lambda: (
                "registered nvidia.com/gpu" in kubectl("-n", ns, "logs", "device-plugin", check=False).stdout
            ),
            timeout=90,
            what="the plugin to register with the real kubelet",
        )
        kubectl.wait_for(
            lambda: (
                kubectl.json("get", "node", node.NAME)["status"]["allocatable"].get("nvidia.com/gpu") == "1"
            ),
            timeout=90,
            what="the real kubelet to advertise the one GPU the plugin was given",
        )
        pod = workload_pod("gpu", {}, wait=True)
        pod["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
        kubectl("-n", ns, "apply", "-f", "-", stdin=json.dumps(pod))
        kubectl.wait_for(
            lambda: kubectl.json("-n", ns, "get", "pod", "gpu")["status"].get("phase") == "Running",
            timeout=120,
            what="the GPU pod on the real node to run",
        )
        lines = kubectl("-n", ns, "logs", "gpu").stdout.splitlines()
        if strategy == "envvar":
            assert f"env NVIDIA_VISIBLE_DEVICES={given}" in lines, lines
        else:
            assert "env NVIDIA_VISIBLE_DEVICES=/var/run/nvidia-container-devices" in lines, lines
            assert f"mount /var/run/nvidia-container-devices/{given}" in lines, lines
        # through the NVIDIA runtime (the node's default) and its hook: that GPU's device node, no other
        minor = gpus[1]["minor_number"]
        assert [x for x in lines if x.startswith("device ")] == [f"device /dev/nvidia{minor}"], lines
        # the real kubelet's pod-resources answer: the pod holds exactly that GPU, read by gpusplit's module
        result = ansible_module(
            "localhost",
            "gpusplit.k8s.gpu_pod_resources",
            f"socket={node.POD_RESOURCES_SOCKET} timeout=20",
            INVENTORY,
        )
        held = [
            (h["pod"], h["resource_name"], h["device_id"]) for h in result["holders"] if h["namespace"] == ns
        ]
        assert held == [("gpu", "nvidia.com/gpu", given)], result["holders"]
    finally:
        kubectl("-n", ns, "delete", "pod", "--all", "--wait=true", "--timeout=60s", check=False)
        node.write_nvidia_config()


def start_plugin(kubectl, ns: str, strategy: str, given: list[str]) -> None:
    """The lab's device plugin on the real node, given ``given`` by the NVIDIA runtime; waits until
    the kubelet advertises them."""
    toolkit_config(hardened=False)  # the toolkit's stock config.toml: the plugin's env is honoured
    kubectl("-n", ns, "apply", "-f", "-", stdin=json.dumps(plugin_pod(strategy, given)))
    kubectl.wait_for(
        lambda: "registered nvidia.com/gpu" in kubectl("-n", ns, "logs", "device-plugin", check=False).stdout,
        timeout=90,
        what="the plugin to register with the real kubelet",
    )
    kubectl.wait_for(
        lambda: (
            kubectl.json("get", "node", node.NAME)["status"]["allocatable"].get("nvidia.com/gpu")
            == str(len(given))
        ),
        timeout=90,
        what=f"the real kubelet to advertise the {len(given)} GPU(s) the plugin was given",
    )


def cli_records() -> list[dict]:
    path = node.CLI_RECORD
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_a_gpu_pod_starts_through_the_nvidia_runtime_and_its_hook_with_the_uuid_the_kubelet_allocated(
    real_node, kubectl, ns
):
    """containerd -> the NVIDIA container runtime (the `nvidia` handler) -> runc with the toolkit's
    hook -> the nvidia-container-cli stand-in, which records the devices it was asked for."""
    gpus = json.loads(FIXTURE.read_text())["gpus"]
    kubectl(
        "apply",
        "-f",
        "-",
        stdin=json.dumps(
            {
                "apiVersion": "node.k8s.io/v1",
                "kind": "RuntimeClass",
                "metadata": {"name": "nvidia"},
                "handler": "nvidia",
            }
        ),
    )
    start_plugin(kubectl, ns, "envvar", [g["uuid"] for g in gpus])
    try:
        before = len(cli_records())
        pod = workload_pod("cuda", {}, wait=True)
        pod["spec"]["runtimeClassName"] = "nvidia"
        pod["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
        kubectl("-n", ns, "apply", "-f", "-", stdin=json.dumps(pod))
        kubectl.wait_for(
            lambda: kubectl.json("-n", ns, "get", "pod", "cuda")["status"].get("phase") == "Running",
            timeout=120,
            what="the GPU pod to start through the NVIDIA runtime",
        )
        answer = pr.read_pod_resources(str(node.POD_RESOURCES_SOCKET))
        allocated = [
            d
            for p in answer["pods"]
            if (p["namespace"], p["name"]) == (ns, "cuda")
            for c in p["containers"]
            for dev in c["devices"]
            for d in dev["device_ids"]
        ]
        assert len(allocated) == 1, answer
        calls = cli_records()[before:]
        assert [c["devices"] for c in calls] == [allocated], calls
        assert calls[0]["command"] == "configure" and calls[0]["all"] is False
    finally:
        kubectl("-n", ns, "delete", "pod", "--all", "--wait=true", "--timeout=60s", check=False)


def devices_of(ns: str, pod: str) -> list[str] | None:
    """The device ids the real kubelet's pod-resources answer gives the pod (None: the pod is not in it)."""
    for p in pr.read_pod_resources(str(node.POD_RESOURCES_SOCKET))["pods"]:
        if (p["namespace"], p["name"]) == (ns, pod):
            return [d for c in p["containers"] for dev in c["devices"] for d in dev["device_ids"]]
    return None


def test_a_pod_keeps_its_gpu_on_the_real_kubelet_when_the_plugin_stops_advertising_it_until_evicted(
    real_node, kubectl, ns
):
    """k8s-device-plugin#313 on the real kubelet: the plugin restarts without the GPU a running pod
    holds (a re-split gave it to the host); the kubelet keeps the pod's device, its pod-resources
    answer still says so, until gpusplit's pod_eviction evicts the pod."""
    uuids = [g["uuid"] for g in json.loads(FIXTURE.read_text())["gpus"]]
    start_plugin(kubectl, ns, "envvar", uuids)
    try:
        pod = workload_pod("holder", {}, wait=True)
        pod["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
        kubectl("-n", ns, "apply", "-f", "-", stdin=json.dumps(pod))
        kubectl.wait_for(
            lambda: kubectl.json("-n", ns, "get", "pod", "holder")["status"].get("phase") == "Running",
            timeout=120,
            what="the GPU pod to run",
        )
        held = devices_of(ns, "holder")
        assert held and len(held) == 1 and held[0] in uuids, held
        # the re-split: the plugin starts again, given only the other GPU
        kubectl("-n", ns, "delete", "pod", "device-plugin", "--wait=true", "--timeout=60s")
        start_plugin(kubectl, ns, "envvar", [u for u in uuids if u != held[0]])
        assert devices_of(ns, "holder") == held  # the kubelet never takes a device back from a running pod
        assert kubectl.json("-n", ns, "get", "pod", "holder")["status"]["phase"] == "Running"
        args = {"kubeconfig": str(C.KUBECONFIG), "pods": [{"namespace": ns, "name": "holder"}], "delay": 0.5}
        result = ansible_module("localhost", "gpusplit.k8s.pod_eviction", json.dumps(args), INVENTORY)
        assert result.get("changed") is True, result
        kubectl.wait_for(
            lambda: devices_of(ns, "holder") is None,
            timeout=60,
            what="the evicted pod to leave the real kubelet's pod-resources answer",
        )
    finally:
        kubectl("-n", ns, "delete", "pod", "--all", "--wait=true", "--timeout=60s", check=False)


def runtime_class(kubectl) -> None:
    body = {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": {"name": "nvidia"},
        "handler": "nvidia",
    }
    kubectl("apply", "-f", "-", stdin=json.dumps(body))


@pytest.mark.parametrize("hardened", [False, True], ids=["stock", "hardened"])
def test_a_pod_asking_for_host_gpus_in_its_env_gets_none_once_gpusplit_hardened_the_runtime(
    real_node, kubectl, ns, hardened
):
    """No GPU asked of the kubelet, NVIDIA_VISIBLE_DEVICES=all or a host GPU's UUID in the pod's env:
    with the toolkit's stock config.toml the hook hands the stand-in those GPUs (the negative control);
    with gpusplit's edit of it (tc.HARDENING_SETTINGS) it hands it none."""
    gpus = json.loads(FIXTURE.read_text())["gpus"]
    runtime_class(kubectl)
    toolkit_config(hardened)
    try:
        before = len(cli_records())
        asks = {"all": "all", "host-uuid": gpus[0]["uuid"]}
        for name, value in asks.items():
            pod = workload_pod(name, {"NVIDIA_VISIBLE_DEVICES": value})
            pod["spec"]["runtimeClassName"] = "nvidia"
            kubectl("-n", ns, "apply", "-f", "-", stdin=json.dumps(pod))
        for name in asks:
            kubectl.wait_for(
                lambda name=name: (
                    kubectl.json("-n", ns, "get", "pod", name)["status"].get("phase") == "Succeeded"
                ),
                timeout=120,
                what=f"the pod {name} to run through the NVIDIA runtime and finish",
            )
        got = sorted((c["all"], tuple(c["devices"])) for c in cli_records()[before:])
        if hardened:
            assert got == [], got
        else:
            assert got == sorted([(True, tuple(g["uuid"] for g in gpus)), (False, (gpus[0]["uuid"],))]), got
    finally:
        node.write_nvidia_config()  # the stock plumbing again


# gpusplit's split on the real node: site.yml with the lab's inventory and the node's
# (inventory/lab/host_vars/lab-node-01.yml: host_count 1 of its two GPUs), the lab's plugin image in
# place of NVIDIA's and the node's taint tolerated; everything else as gpusplit renders it for any node.
SPLIT_NODE_LABEL = f"gpusplit.io/node={node.NAME}"
PLUGIN_SETTINGS = {
    "image": node.DEVICE_PLUGIN_IMAGE,
    "image_pull_policy": "Never",
    "extra_tolerations": [{"key": node.TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}],
}


def on_the_real_node(playbook: str, *extra: str):
    """A playbook on the lab inventory and the real node's, with the lab plugin's settings."""
    return ansible_playbook(
        playbook,
        INVENTORY,
        "-i",
        str(node.INVENTORY),
        "-e",
        json.dumps({"gpusplit_plugin_settings": PLUGIN_SETTINGS}),
        *extra,
    )


def site_on_the_real_node(*extra: str):
    return on_the_real_node("site.yml", "--limit", f"{node.NAME},localhost", *extra)


def gpusplits(keys) -> list[str]:
    """Of a node's label or annotation keys, those a split sets (gpusplit's, NVIDIA's gpu.present),
    not the node's own (node.LABELS)."""
    return [k for k in keys if k.startswith(("gpusplit.io/", "nvidia.com/")) and k not in node.LABELS]


def undo_the_split_of_the_real_node(kubectl) -> None:
    """What site.yml left on the real node, taken away whatever state a failed test left it in: the
    split DaemonSet and its pods, the split's labels and annotations, the host side's files; the
    toolkit's stock config.toml again. Other tests' runs of inventory/lab would otherwise find a
    labelled node that left their inventory and clean it up."""
    kubectl("delete", "daemonsets,configmaps", "-A", "-l", SPLIT_NODE_LABEL, "--wait=true", check=False)
    kubectl.wait_for(
        lambda: not kubectl.json("get", "pods", "-A", "-l", SPLIT_NODE_LABEL)["items"],
        timeout=90,
        what="the split plugin's pods to leave the real node",
    )
    meta = kubectl.json("get", "node", node.NAME)["metadata"]
    if gpusplits(meta.get("labels", {})):
        kubectl("label", "node", node.NAME, *(f"{k}-" for k in gpusplits(meta["labels"])))
    if gpusplits(meta.get("annotations", {})):
        kubectl("annotate", "node", node.NAME, *(f"{k}-" for k in gpusplits(meta["annotations"])))
    shutil.rmtree(node.ROOTDIR / "etc" / "gpusplit", ignore_errors=True)
    for backup in node.NVIDIA_CONFIG.parent.glob(f"{node.NVIDIA_CONFIG.name}.gpusplit-*"):
        backup.unlink()
    node.write_nvidia_config()


@pytest.fixture
def split_real_node(real_node, kubectl):
    """The real node as the lab started it, before the test and after it, even when it fails half-way."""
    undo_the_split_of_the_real_node(kubectl)
    yield
    undo_the_split_of_the_real_node(kubectl)
    meta = kubectl.json("get", "node", node.NAME)["metadata"]
    assert gpusplits(meta.get("labels", {})) == [] and gpusplits(meta.get("annotations", {})) == []
    assert kubectl.json("get", "daemonsets", "-A", "-l", SPLIT_NODE_LABEL)["items"] == []


def containers_cli_calls(kubectl, ns: str, pod: str) -> list[dict]:
    """The nvidia-container-cli stand-in's records of the pod's containers (matched by their ids in
    the root filesystem path the hook passed)."""
    status = kubectl.json("-n", ns, "get", "pod", pod)["status"]
    ids = [c["containerID"].removeprefix("containerd://") for c in status.get("containerStatuses", [])]
    return [c for c in cli_records() if any(f"/{i}/rootfs" in c["rootfs"] for i in ids)]


def run_to_end(kubectl, ns: str, pod: dict) -> list[str]:
    """Run a workload pod to its end on the real node; its report (log lines)."""
    name = pod["metadata"]["name"]
    kubectl("-n", ns, "apply", "-f", "-", stdin=json.dumps(pod))
    kubectl.wait_for(
        lambda: kubectl.json("-n", ns, "get", "pod", name)["status"].get("phase") in ("Succeeded", "Failed"),
        timeout=120,
        what=f"the pod {name} to run on the real node and finish",
    )
    got = kubectl.json("-n", ns, "get", "pod", name)
    assert got["status"]["phase"] == "Succeeded", json.dumps(got["status"], indent=1)
    return kubectl("-n", ns, "logs", name).stdout.splitlines()


def test_site_yml_splits_the_real_node_through_its_kubelet_and_the_nvidia_runtime(
    real_node, kubectl, ns, split_real_node
):
    """gpusplit's own split DaemonSet on the real node: its plugin container gets from the NVIDIA
    runtime (the node's default, hardened by the same run) exactly the GPUs of its NVIDIA_VISIBLE_DEVICES,
    registers them with the real kubelet, which advertises exactly the inventory's Kubernetes share;
    fleet verify says OK; a GPU pod gets exactly that GPU; a pod asking for the host's GPU or every
    GPU through its env gets none, where before the run the same pod got the host's GPU."""
    gpus = {g["uuid"]: g for g in json.loads(FIXTURE.read_text())["gpus"]}
    by_bus = sorted(gpus, key=lambda u: gpus[u]["pci_bus_id"])
    host_gpu, k8s_gpus = by_bus[0], by_bus[1:]  # host_count: 1, the first by PCI bus id

    # the negative control: with the toolkit's stock config.toml (the node before gpusplit) a pod that
    # asks for the host's GPU in its env, with no runtime class and nothing asked of the kubelet, gets it
    before = workload_pod("host-gpu-before", {"NVIDIA_VISIBLE_DEVICES": host_gpu})
    lines = run_to_end(kubectl, ns, before)
    assert f"device /dev/nvidia{gpus[host_gpu]['minor_number']}" in lines, lines
    assert [c["devices"] for c in containers_cli_calls(kubectl, ns, "host-gpu-before")] == [[host_gpu]]

    proc = site_on_the_real_node()
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]

    # fleet verify on the real kubelet's answer
    report = json.loads((C.OUT / "fleet-report.json").read_text())
    (entry,) = [n for n in report["nodes"] if n["name"] == node.NAME]
    assert entry["verdict"] == "OK", entry
    assert (entry["host_gpus"], entry["kubernetes_gpus"]) == ([host_gpu], k8s_gpus), entry

    # the collection's split DaemonSet, pinned to the node, its plugin given the Kubernetes share
    (ds,) = kubectl.json("get", "daemonsets", "-A", "-l", SPLIT_NODE_LABEL)["items"]
    assert ds["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "gpusplit"
    spec = ds["spec"]["template"]["spec"]
    (ctr,) = spec["containers"]
    env = {e["name"]: e.get("value") for e in ctr["env"]}
    assert (
        env["NVIDIA_VISIBLE_DEVICES"] == ",".join(k8s_gpus) and env["DEVICE_LIST_STRATEGY"] == "volume-mounts"
    )
    assert ctr["image"] == node.DEVICE_PLUGIN_IMAGE and "runtimeClassName" not in spec
    assert ctr["securityContext"]["privileged"] is False
    (pod,) = kubectl.json("-n", ds["metadata"]["namespace"], "get", "pods", "-l", SPLIT_NODE_LABEL)["items"]
    assert pod["spec"]["nodeName"] == node.NAME and pod["status"]["phase"] == "Running"
    # the hardened runtime honoured the plugin's request (CAP_SYS_ADMIN: privileged in the toolkit's
    # sense) and the stand-in made exactly those GPUs' device nodes in its /dev
    assert "accept-nvidia-visible-devices-envvar-when-unprivileged = false" in node.NVIDIA_CONFIG.read_text()
    calls = containers_cli_calls(kubectl, ds["metadata"]["namespace"], pod["metadata"]["name"])
    assert calls and all(c["devices"] == k8s_gpus for c in calls), calls
    log = kubectl("-n", ds["metadata"]["namespace"], "logs", pod["metadata"]["name"]).stdout
    assert f"the runtime exposed {len(k8s_gpus)} GPU(s) to this container: [{' '.join(k8s_gpus)}]" in log, log
    assert "registered nvidia.com/gpu with the kubelet" in log, log

    # the real kubelet advertises exactly the Kubernetes share
    status = kubectl.json("get", "node", node.NAME)["status"]
    assert status["allocatable"]["nvidia.com/gpu"] == str(len(k8s_gpus)), status["allocatable"]
    assert status["capacity"]["nvidia.com/gpu"] == str(len(k8s_gpus)), status["capacity"]

    # a GPU pod gets that GPU through the plugin's volume-mount list, the kubelet and the runtime
    gpu_pod = workload_pod("gpu", {})
    gpu_pod["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
    lines = run_to_end(kubectl, ns, gpu_pod)
    minor = gpus[k8s_gpus[0]]["minor_number"]
    assert [x for x in lines if x.startswith("device ")] == [f"device /dev/nvidia{minor}"], lines
    assert f"mount /var/run/nvidia-container-devices/{k8s_gpus[0]}" in lines, lines
    assert [c["devices"] for c in containers_cli_calls(kubectl, ns, "gpu")] == [[k8s_gpus[0]]]

    # a pod asking for the host's GPU, or every GPU, through its env gets none
    for name, value in (("host-gpu", host_gpu), ("all-gpus", "all")):
        lines = run_to_end(kubectl, ns, workload_pod(name, {"NVIDIA_VISIBLE_DEVICES": value}))
        assert f"env NVIDIA_VISIBLE_DEVICES={value}" in lines, lines
        assert [x for x in lines if x.startswith("device ")] == [], lines
        assert containers_cli_calls(kubectl, ns, name) == []


def resplit_on_the_real_node(split: dict, policy: str, *extra: str):
    return ansible_playbook(
        "resplit.yml",
        INVENTORY,
        "-i",
        str(node.INVENTORY),
        "--limit",
        f"{node.NAME},localhost",
        "-e",
        json.dumps({"gpusplit_plugin_settings": PLUGIN_SETTINGS, "gpusplit_split": split}),
        "-e",
        f"gpusplit_resplit_policy={policy}",
        *extra,
    )


def host_share() -> list[str]:
    """The host's GPUs as the host side wrote them on the node (etc/gpusplit/host-gpus.env)."""
    text = (node.ROOTDIR / "etc" / "gpusplit" / "host-gpus.env").read_text()
    (line,) = [x for x in text.splitlines() if x.startswith("GPUSPLIT_HOST_GPUS=")]
    return [u for u in line.partition("=")[2].strip("'\"").split(",") if u]


def split_plugin(kubectl) -> tuple[dict, dict | None]:
    """The real node's split DaemonSet and its running pod (None while there is none)."""
    (ds,) = kubectl.json("get", "daemonsets", "-A", "-l", SPLIT_NODE_LABEL)["items"]
    pods = kubectl.json("-n", ds["metadata"]["namespace"], "get", "pods", "-l", SPLIT_NODE_LABEL)["items"]
    running = [
        p
        for p in pods
        if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
    ]
    return ds, (running[0] if running else None)


def hold_a_gpu(kubectl, ns: str, name: str) -> list[str]:
    """A pod on the real node that asks for nvidia.com/gpu: 1 and runs; the GPU the kubelet gave it."""
    pod = workload_pod(name, {}, wait=True)
    pod["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
    kubectl("-n", ns, "apply", "-f", "-", stdin=json.dumps(pod))
    kubectl.wait_for(
        lambda: kubectl.json("-n", ns, "get", "pod", name)["status"].get("phase") == "Running",
        timeout=120,
        what=f"the GPU pod {name} to run",
    )
    return devices_of(ns, name)


def visible_devices(ds: dict) -> str:
    (ctr,) = ds["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e.get("value") for e in ctr["env"]}["NVIDIA_VISIBLE_DEVICES"]


def test_a_resplit_of_the_real_node_evicts_the_pod_in_the_way_or_leaves_it_its_gpu(
    real_node, kubectl, ns, split_real_node
):
    """k8s-device-plugin#313 through gpusplit's re-split (resplit.yml) on the real kubelet. With policy
    `evict` the pod holding the GPU that moves to the host is evicted, leaves the kubelet's
    pod-resources answer, and the node advertises its new share. With policy `wait` the split plugin
    starts again without the moving GPU, and the pod keeps it (the real kubelet's pod-resources
    answer) until the wait runs out, the host side unchanged."""
    gpus = {g["uuid"]: g for g in json.loads(FIXTURE.read_text())["gpus"]}
    first_gpu, second_gpu = sorted(gpus, key=lambda u: gpus[u]["pci_bus_id"])
    proc = site_on_the_real_node()  # host_count 1: the first GPU stays with the host
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    assert hold_a_gpu(kubectl, ns, "holder") == [second_gpu]

    # evict: the second GPU goes to the host, the first to Kubernetes
    proc = resplit_on_the_real_node({"host_uuids": [second_gpu]}, "evict")
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    assert f"by pod {ns}/holder" in proc.stdout, proc.stdout[-6000:]
    kubectl.wait_for(
        lambda: devices_of(ns, "holder") is None,
        timeout=60,
        what="the evicted pod to leave the real kubelet's pod-resources answer",
    )
    ds, plugin = kubectl.wait_for(
        lambda: (lambda d, p: (d, p) if p else None)(*split_plugin(kubectl)), timeout=90
    )
    assert visible_devices(ds) == first_gpu
    log = kubectl("-n", ds["metadata"]["namespace"], "logs", plugin["metadata"]["name"]).stdout
    assert f"the runtime exposed 1 GPU(s) to this container: [{first_gpu}]" in log, log
    kubectl.wait_for(
        lambda: kubectl.json("get", "node", node.NAME)["status"]["allocatable"].get("nvidia.com/gpu") == "1",
        timeout=90,
        what="the real kubelet to advertise the new share",
    )
    assert host_share() == [second_gpu]

    # wait: a pod holds the first GPU, which goes back to the host
    assert hold_a_gpu(kubectl, ns, "keeper") == [first_gpu]
    proc = resplit_on_the_real_node(
        {"host_uuids": [first_gpu]}, "wait", "-e", "gpusplit_resplit_wait_seconds=15"
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and f"{ns}/keeper" in out, out[-6000:]
    # the plugin runs again without the first GPU: the runtime gave it only the second
    ds, again = kubectl.wait_for(
        lambda: (lambda d, p: (d, p) if p and p["metadata"]["uid"] != plugin["metadata"]["uid"] else None)(
            *split_plugin(kubectl)
        ),
        timeout=90,
        what="the split plugin to run again",
    )
    assert first_gpu not in visible_devices(ds)
    calls = containers_cli_calls(kubectl, ds["metadata"]["namespace"], again["metadata"]["name"])
    assert calls and all(first_gpu not in c["devices"] for c in calls), calls
    # and the real kubelet leaves the pod its GPU
    assert devices_of(ns, "keeper") == [first_gpu]
    assert kubectl.json("-n", ns, "get", "pod", "keeper")["status"]["phase"] == "Running"
    assert host_share() == [second_gpu]  # the host side as the evict run left it


# the cluster's own device plugin on the real node: the lab's plugin image as NVIDIA's chart runs it on a
# hardened toolkit (every GPU, volume-mounts, CAP_SYS_ADMIN), kept off split nodes by the affinity
# gpusplit's exclusion (gpusplit_stock_plugin_action=exclude) adds
STOCK_NAME = "stock-device-plugin"


def stock_daemonset(excluded: bool = True) -> dict:
    """The stock plugin's DaemonSet; ``excluded=False``: as a user deployed it, on every node."""
    pod = plugin_pod("volume-mounts", ["all"])["spec"]
    pod["tolerations"] = [{"operator": "Exists"}]
    if excluded:
        pod["affinity"] = {
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
        }
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": STOCK_NAME, "namespace": "kube-system"},
        "spec": {
            "selector": {"matchLabels": {"app": STOCK_NAME}},
            "template": {"metadata": {"labels": {"app": STOCK_NAME}}, "spec": pod},
        },
    }


def stock_pods(kubectl) -> list[dict]:
    """The stock plugin's running pods on the real node."""
    return [
        p
        for p in kubectl.json("-n", "kube-system", "get", "pods", "-l", f"app={STOCK_NAME}")["items"]
        if p["spec"].get("nodeName") == node.NAME
        and p["status"].get("phase") == "Running"
        and not p["metadata"].get("deletionTimestamp")
    ]


def remove_stock_plugin(kubectl) -> None:
    kubectl("-n", "kube-system", "delete", "daemonset", STOCK_NAME, "--wait=true", check=False)
    kubectl.wait_for(
        lambda: not kubectl.json("-n", "kube-system", "get", "pods", "-l", f"app={STOCK_NAME}")["items"],
        timeout=90,
        what="the stock plugin's pods to leave the real node",
    )


@pytest.fixture
def stock_plugin(split_real_node, kubectl):
    """No stock plugin before the test; none after it, nor gpusplit's GPU taint, even when it fails."""
    remove_stock_plugin(kubectl)
    yield
    remove_stock_plugin(kubectl)
    kubectl("taint", "node", node.NAME, "nvidia.com/gpu:NoSchedule-", check=False)


def unsplit_on_the_real_node(*extra: str):
    return on_the_real_node(
        "unsplit.yml", "-e", "gpusplit_unsplit_to=kubernetes", "-e", f"gpusplit_hosts={node.NAME}", *extra
    )


def gpu_pods_on_the_node(kubectl) -> list[str]:
    """The pods on the real node (any namespace, terminating ones too) that ask for nvidia.com/gpu."""
    return [
        f"{p['metadata']['namespace']}/{p['metadata']['name']}"
        for p in kubectl.json("get", "pods", "-A", "--field-selector", f"spec.nodeName={node.NAME}")["items"]
        if any(
            "nvidia.com/gpu" in ((c.get("resources") or {}).get("limits") or {})
            for c in p["spec"].get("containers") or []
        )
    ]


def test_unsplit_hand_over_on_the_real_kubelet(real_node, kubectl, core_api, stock_plugin):
    """unsplit.yml to kubernetes on the real kubelet: the split plugin goes before the stock plugin starts
    (both serve nvidia.com/gpu on one socket, so the kubelet never has both); the node's allocatable, read
    every 0.2 s during the run, ends at every GPU and the stock plugin registered with the kubelet; the
    split DaemonSet, gpusplit's labels and taint are gone; the toolkit's config.toml is byte for byte what
    it was before site.yml; a second run changes nothing."""
    gpus = json.loads(FIXTURE.read_text())["gpus"]
    share = len(gpus) - 1  # host_count 1
    before = node.NVIDIA_CONFIG.read_bytes()
    # an earlier test's GPU pod may still be terminating (its namespace goes without waiting): site.yml would
    # rightly refuse to move a GPU it holds
    kubectl.wait_for(lambda: not gpu_pods_on_the_node(kubectl), timeout=180, what="no GPU pod on the node")
    proc = site_on_the_real_node()
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    kubectl("apply", "-f", "-", stdin=json.dumps(stock_daemonset()))

    def allocatable() -> int:
        return int(core_api.read_node(node.NAME).status.allocatable.get("nvidia.com/gpu", "0"))

    kubectl.wait_for(lambda: allocatable() == share, timeout=90, what="the Kubernetes share advertised")
    assert not stock_pods(kubectl)  # kept off the split node
    assert node.NVIDIA_CONFIG.read_bytes() != before  # hardened by site.yml

    seen: list[tuple[float, int]] = []
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            seen.append((time.monotonic(), allocatable()))
            stop.wait(0.2)

    watcher = threading.Thread(target=watch)
    start = time.monotonic()
    watcher.start()
    try:
        proc = unsplit_on_the_real_node()
        ran = time.monotonic() - start
        assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
        kubectl.wait_for(lambda: allocatable() == len(gpus), timeout=60, what="every GPU advertised")
        time.sleep(1)  # a last read or two after the run
    finally:
        stop.set()
        watcher.join()
    lowest = min(n for _, n in seen)
    settled = next(t for t, n in seen if n == len(gpus) and all(m == n for u, m in seen if u >= t)) - start
    print(f"unsplit on {node.NAME}: run {ran:.1f}s, {len(seen)} reads of allocatable, lowest {lowest}")
    print(f"allocatable settled at {len(gpus)} after {settled:.1f}s; reads: {[n for _, n in seen]}")
    assert allocatable() == len(gpus)
    text = " ".join(proc.stdout.split())
    assert "the split plugin goes first, the gap until the stock plugin registers is measured" in text, text[
        -6000:
    ]
    assert re.search(rf"gap on {node.NAME} .*about [0-9.]+s until the stock plugin advertised the GPUs", text)

    # the stock plugin runs on the node, given every GPU by the runtime, and registered them
    (pod,) = stock_pods(kubectl)
    log = kubectl("-n", "kube-system", "logs", pod["metadata"]["name"]).stdout
    uuids = sorted(g["uuid"] for g in gpus)
    exposed = re.search(r"the runtime exposed (\d+) GPU\(s\) to this container: \[([^]]*)\]", log)
    assert exposed and sorted(exposed.group(2).split()) == uuids, log
    assert "registered nvidia.com/gpu with the kubelet" in log, log
    # the split DaemonSet, gpusplit's labels, annotations and taint are gone; the node's own taint stays
    assert kubectl.json("get", "daemonsets,configmaps", "-A", "-l", SPLIT_NODE_LABEL)["items"] == []
    got = kubectl.json("get", "node", node.NAME)
    assert gpusplits(got["metadata"].get("labels", {})) == [], got["metadata"]["labels"]
    assert got["spec"].get("taints") == [{"key": node.TAINT_KEY, "value": "true", "effect": "NoSchedule"}]
    # the host's files: config.toml byte for byte as before site.yml, gpusplit's env file gone
    assert node.NVIDIA_CONFIG.read_bytes() == before
    assert not (node.ROOTDIR / "etc" / "gpusplit" / "host-gpus.env").exists()

    # a second run changes nothing in the cluster or on the host (it writes the re-split's diff again)
    again = unsplit_on_the_real_node()
    assert again.returncode == 0, again.stdout[-6000:] + again.stderr[-3000:]
    assert {t.split(" -> ")[0] for t in changed_tasks(again.stdout)} <= {
        "gpusplit.k8s.gpu_resplit : Write the plan diff (on the controller)"
    }, again.stdout[-6000:]
    assert allocatable() == len(gpus) and len(stock_pods(kubectl)) == 1


# the kubelets the take-over runs on: the lab's release and an older one that may join its apiserver
OLDER_KUBELET = C.versions()["NODE_OLDER_KUBELET"]  # make test builds it (make lab-build-test)


@pytest.fixture
def kubelet_at(request, real_node):
    """The real node's kubelet at the release asked for (None: the lab's), the pods and containerd kept;
    after the test, the kubelet `lab up` starts."""
    release = request.param or C.lab_kube_version()
    try:
        if node.running_kubelet_release() != release:
            node.restart_kubelet(release)
    except node.NodeError as exc:
        pytest.fail(str(exc), pytrace=False)
    yield release
    if node.running_kubelet_release() != node.kubelet_release():
        node.restart_kubelet(node.kubelet_release())


# the real kubelet's device manager, as it logs a plugin's end and a registration (klog: "I1205 23:24:24.591493 ...")
KLOG_TIME = re.compile(r"^[IWE]\d{4} (\d\d):(\d\d):(\d\d\.\d+) ")
PLUGIN_ENDED = "ListAndWatch ended unexpectedly for device plugin"
PLUGIN_REGISTERS = "Got registration request from device plugin"


def device_plugin_events(text: str) -> list[tuple[float, str]]:
    """(seconds of the day, "ended" or "registers") of the kubelet's device-plugin lines in ``text``."""
    out = []
    for line in text.splitlines():
        kind = "ended" if PLUGIN_ENDED in line else "registers" if PLUGIN_REGISTERS in line else None
        stamp = KLOG_TIME.match(line)
        if kind and stamp:
            h, m, sec = stamp.groups()
            out.append((int(h) * 3600 + int(m) * 60 + float(sec), kind))
    return out


def runs(reads: list[int]) -> list[tuple[int, int]]:
    """Consecutive equal reads as (value, how many)."""
    out: list[tuple[int, int]] = []
    for n in reads:
        if out and out[-1][0] == n:
            out[-1] = (n, out[-1][1] + 1)
        else:
            out.append((n, 1))
    return out


@pytest.mark.parametrize(
    "kubelet_at", [None, OLDER_KUBELET], ids=["lab-kubelet", "kubelet-1.36"], indirect=True
)
def test_site_yml_takes_the_real_node_over_from_a_stock_plugin(
    real_node, kubelet_at, kubectl, core_api, stock_plugin
):
    """A stock device plugin (a user's DaemonSet on every node, no exclusion) advertises every GPU of the
    real node; site.yml with gpusplit_stock_plugin_action=exclude keeps it off the node, waits until its pod
    is gone, then starts the split plugin: the node's pods, read every 0.2 s with its allocatable, never
    hold both plugins at once; the end state is exactly the Kubernetes share; the gap (allocatable below
    the share while neither plugin serves) is printed, not bounded; a second run changes nothing. On the
    lab's kubelet and on a 1.36 kubelet (no kubernetes/kubernetes#121994 fix)."""
    gpus = json.loads(FIXTURE.read_text())["gpus"]
    share = len(gpus) - 1  # host_count 1
    assert node.status()["kubelet_version"] == f"v{kubelet_at}"
    kubectl.wait_for(lambda: not gpu_pods_on_the_node(kubectl), timeout=180, what="no GPU pod on the node")

    def allocatable() -> int:
        return int(core_api.read_node(node.NAME).status.allocatable.get("nvidia.com/gpu", "0"))

    # an earlier test's plugin stays in the node's status until the kubelet's next status update
    kubectl.wait_for(lambda: allocatable() == 0, timeout=90, what="no plugin's GPU left in the node's status")
    kubectl("apply", "-f", "-", stdin=json.dumps(stock_daemonset(excluded=False)))

    def stock_registered() -> bool:
        pods = stock_pods(kubectl)
        return (
            len(pods) == 1
            and "registered nvidia.com/gpu with the kubelet"
            in kubectl("-n", "kube-system", "logs", pods[0]["metadata"]["name"], check=False).stdout
        )

    kubectl.wait_for(stock_registered, timeout=120, what="the stock plugin to register with the real kubelet")
    kubectl.wait_for(
        lambda: allocatable() == len(gpus), timeout=120, what="every GPU advertised by the stock plugin"
    )

    split_key, split_value = SPLIT_NODE_LABEL.split("=")
    seen: list[tuple[float, int, list[str], list[str]]] = []  # (time, allocatable, stock pods, split pods)
    failed_reads: list[str] = []
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            try:
                n = allocatable()
                pods = core_api.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node.NAME}").items
            except Exception as exc:  # a slow apiserver: the read is counted and the watch goes on
                failed_reads.append(str(exc)[:200])
            else:
                labels = [(p.metadata.name, p.metadata.labels or {}) for p in pods]
                seen.append(
                    (
                        time.monotonic(),
                        n,
                        [name for name, lb in labels if lb.get("app") == STOCK_NAME],
                        [name for name, lb in labels if lb.get(split_key) == split_value],
                    )
                )
            stop.wait(0.2)

    kubelet_log = C.LOGS / "kubelet.log"
    log_from = kubelet_log.stat().st_size
    watcher = threading.Thread(target=watch)
    start = time.monotonic()
    watcher.start()
    try:
        proc = site_on_the_real_node("-e", "gpusplit_stock_plugin_action=exclude")
        ran = time.monotonic() - start
        assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
        kubectl.wait_for(lambda: allocatable() == share, timeout=90, what="the Kubernetes share advertised")
        time.sleep(1)  # a last read or two after the run
    finally:
        stop.set()
        watcher.join()

    both = [(round(t - start, 1), s, k) for t, _, s, k in seen if s and k]
    assert both == [], f"the stock and the split plugin on {node.NAME} at once: {both}"
    stock_gone = next(t for t, _, s, _ in seen if not s) - start
    split_bound = next(t for t, _, _, k in seen if k) - start
    assert stock_gone <= split_bound
    below = [t for t, n, _, _ in seen if n < share]
    gap = 0.0
    if below:
        back = next((t for t, n, _, _ in seen if t > below[0] and n >= share), seen[-1][0])
        gap = back - below[0]
    lowest = min(n for _, n, _, _ in seen)
    # the kubelet's own account: the stock plugin's stream ends, then exactly one plugin registers (the split one)
    with kubelet_log.open("rb") as f:
        f.seek(log_from)
        events = device_plugin_events(f.read().decode(errors="replace"))
    assert [kind for _, kind in events] == ["ended", "registers"], events
    (ended, _), (registered, _) = events
    status = kubectl.json("get", "node", node.NAME)["status"]
    print(
        f"take-over of {node.NAME} on kubelet {kubelet_at}: site.yml {ran:.1f}s, {len(seen)} reads "
        f"({len(failed_reads)} failed); stock pod gone at {stock_gone:.1f}s, split pod bound at {split_bound:.1f}s; "
        f"allocatable below the share ({share}) for {gap:.1f}s, lowest {lowest}; in the kubelet no plugin for "
        f"{registered - ended:.1f}s (the stock plugin's stream ended, then the split plugin registered); "
        f"capacity {status['capacity'].get('nvidia.com/gpu')}; reads (value, count): {runs([n for _, n, _, _ in seen])}"
    )
    assert len(seen) > 10, failed_reads[-3:]

    # the end state: exactly the Kubernetes share through the split plugin; the stock plugin kept off the node
    assert status["allocatable"]["nvidia.com/gpu"] == str(share), status["allocatable"]
    report = json.loads((C.OUT / "fleet-report.json").read_text())
    (entry,) = [n for n in report["nodes"] if n["name"] == node.NAME]
    assert entry["verdict"] == "OK", entry
    assert not stock_pods(kubectl)
    ds, plugin = split_plugin(kubectl)
    assert plugin is not None
    log = kubectl("-n", ds["metadata"]["namespace"], "logs", plugin["metadata"]["name"]).stdout
    assert "registered nvidia.com/gpu with the kubelet" in log, log
    stock_ds = kubectl.json("-n", "kube-system", "get", "daemonset", STOCK_NAME)
    assert "gpusplit.io/split" in json.dumps(stock_ds["spec"]["template"]["spec"].get("affinity"))

    # a second run changes nothing
    again = site_on_the_real_node("-e", "gpusplit_stock_plugin_action=exclude")
    assert again.returncode == 0, again.stdout[-6000:] + again.stderr[-3000:]
    assert changed_tasks(again.stdout) == [], changed_tasks(again.stdout)
    assert allocatable() == share and not stock_pods(kubectl)


def test_a_second_build_of_the_node_is_cached_and_leaves_its_binaries_alone():
    bins = [
        node.kubelet_binary(),
        *(C.BIN / n for n in ("containerd", "ctr", "containerd-shim-runc-v2", "runc")),
    ]
    bins += [node.CNI_BIN / n for n in ("bridge", "loopback", "host-local")]
    bins += [node.IMAGE_PROGRAMS / n for n in ("pause", "workload", "device-plugin")]
    files = bins + [b.with_name(f".{b.name}.version") for b in bins]
    before = {f: f.stat().st_mtime_ns for f in files}
    env = {**os.environ, "K8S": C.lab_kube_version()}
    proc = subprocess.run(
        [str(C.ROOT / "lab" / "build_node.sh"), "all"], capture_output=True, text=True, env=env, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    assert "building" not in proc.stderr and "cached" in proc.stderr, proc.stderr
    assert {f: f.stat().st_mtime_ns for f in files} == before
    pins = C.versions()
    assert (C.BIN / ".containerd.version").read_text().strip() == pins["CONTAINERD_VERSION"]
    assert (C.BIN / ".runc.version").read_text().strip() == pins["RUNC_VERSION"]
    assert (node.CNI_BIN / ".bridge.version").read_text().strip() == pins["CNI_PLUGINS_VERSION"]


def test_zz_lab_down_leaves_nothing_of_the_real_node_and_up_brings_it_back(real_node):
    pids = [real_node["kubelet_pid"], real_node["containerd_pid"]]
    assert labctl.down() == 0
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()
    assert node.leftover_processes() == []
    assert node.node_mounts() == [], "still mounted"
    assert node.cgroup_dirs() == [], "cgroups left"
    assert not Path(f"/sys/class/net/{node.BRIDGE}").exists()
    assert not node.POD_RESOURCES_SOCKET.exists() and not node.CONTAINERD_SOCKET.exists()
    assert labctl.up(timeout=240) == 0
    assert node.status()["ready"]
