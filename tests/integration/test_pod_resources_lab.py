"""Who holds each GPU, on the lab: real pods bound by the real scheduler to lab-dgx-01, their devices
read with the module gpu_pod_resources (through Ansible, with the lab inventory's host root) from the
node's pod-resources socket, which lab/podresources.py serves as the kubelet would (docs/dev/lab.md).
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pytest
from ansible_output import ansible_module

from ansible_collections.gpusplit.k8s.plugins.module_utils._kubelet import pod_resources as pr
from lab import components as C
from lab import deviceplugin as dp
from lab import podresources as ps

ROOT = Path(__file__).resolve().parents[2]
INVENTORY = ROOT / "inventory" / "lab"
NODE = "lab-dgx-01"
OTHER_NODE = "lab-h200-01"
PROBE_DS = "gpusplit-hpod-probe-dp"


def node_share(kubectl, core_api) -> tuple[list[str], bool]:
    """The GPU UUIDs NODE's running device plugin advertises; a plugin of the test's own is started
    (the inventory's share: every GPU but the first two by PCI bus id) when none runs there.
    Returns (uuids, whether the test started the plugin)."""
    api = core_api.api_client
    running = dp.running_plugins(api).get(NODE)
    gpus = dp.fixture_gpus("dgx-h100")
    created = False
    if not running:
        by_bus = sorted(gpus, key=lambda g: g["pci_bus_id"])
        share = ",".join(g["uuid"] for g in by_bus[2:])
        ds = {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": PROBE_DS, "namespace": "default"},
            "spec": {
                "selector": {"matchLabels": {"app": PROBE_DS}},
                "template": {
                    "metadata": {"labels": {"app": PROBE_DS}},
                    "spec": {
                        "nodeSelector": {"kubernetes.io/hostname": NODE},
                        "tolerations": [{"operator": "Exists"}],
                        "containers": [
                            {
                                "name": "plugin",
                                "image": "nvcr.io/nvidia/k8s-device-plugin:v0.20.0",
                                "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": share}],
                            }
                        ],
                    },
                },
            },
        }
        kubectl("apply", "-f", "-", stdin=json.dumps(ds))
        created = True
    try:
        if created:
            running = kubectl.wait_for(
                lambda: dp.running_plugins(api).get(NODE), timeout=120, what="a plugin on lab-dgx-01"
            )
        container = dp.plugin_container(running[-1][1])
        uuids = dp.advertised_ids(dp.visible_gpus(gpus, container), dp.mig_strategy(container))[dp.RESOURCE]
        kubectl.wait_for(
            lambda: (
                kubectl.json("get", "node", NODE)["status"]["allocatable"].get(dp.RESOURCE) == str(len(uuids))
            ),
            timeout=60,
            what=f"{NODE} to advertise {len(uuids)} GPUs",
        )
    except BaseException:
        # a plugin the test started never outlives it: a later play would find an unmanaged plugin
        if created:
            kubectl("-n", "default", "delete", "daemonset", PROBE_DS, "--ignore-not-found", check=False)
        raise
    return uuids, created


def gpu_pod(name: str, ns: str, gpus: int) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": NODE},
            "tolerations": [{"operator": "Exists"}],  # the GPU taint and any other the lab's runs left
            "containers": [
                {
                    "name": "cuda",
                    "image": "registry.local/cuda:12",
                    "resources": {"limits": {dp.RESOURCE: str(gpus)}},
                }
            ],
        },
    }


def module_on_node(host: str = NODE) -> dict:
    """gpu_pod_resources run by Ansible (ad hoc) on the lab host, on the socket under its gpusplit_host_root."""
    return ansible_module(
        host,
        "gpusplit.k8s.gpu_pod_resources",
        "socket={{ gpusplit_host_root }}/var/lib/kubelet/pod-resources/kubelet.sock timeout=20",
        INVENTORY,
    )


def ours(result: dict, ns: str) -> dict[str, list[str]]:
    """pod name -> the GPU ids it holds, for the pods of namespace ns."""
    out: dict[str, list[str]] = {}
    for holder in result["holders"]:
        if holder["namespace"] == ns and holder["resource_name"] == dp.RESOURCE:
            out.setdefault(holder["pod"], []).append(holder["device_id"])
    return out


@pytest.fixture
def scene(lab, kubectl, core_api):
    share, created = node_share(kubectl, core_api)
    ns = kubectl.namespace(f"hpod-{uuid.uuid4().hex[:6]}")
    yield {"ns": ns, "share": share}
    kubectl("delete", "namespace", ns, "--wait=false", check=False)
    if created:
        kubectl("-n", "default", "delete", "daemonset", PROBE_DS, "--ignore-not-found", check=False)


def test_two_gpu_pods_hold_distinct_gpus_of_the_share_until_deleted(scene, kubectl, lab):
    ns, share = scene["ns"], scene["share"]
    socket = str(ps.socket_path(NODE))
    for name, gpus in (("trainer", 2), ("infer", 1)):
        kubectl("apply", "-f", "-", stdin=json.dumps(gpu_pod(name, ns, gpus)))
    for name in ("trainer", "infer"):
        kubectl.wait_for(
            lambda name=name: kubectl.json("-n", ns, "get", "pod", name)["spec"].get("nodeName") == NODE,
            timeout=90,
            what=f"the scheduler to bind {name} to {NODE}",
        )
    # the stand-in assigns on its next tick (every 2 s); read the socket directly until it has
    kubectl.wait_for(
        lambda: sorted(ours(pr.read_pod_resources(socket), ns)) == ["infer", "trainer"],
        timeout=60,
        what="both pods in the node's List answer",
    )

    result = module_on_node()
    assert result["changed"] is False and result["available"] is True
    assert result["socket"] == str(C.HOSTS_ROOT / NODE / "var/lib/kubelet/pod-resources/kubelet.sock")
    held = ours(result, ns)
    assert len(held["trainer"]) == 2 and len(held["infer"]) == 1
    every = held["trainer"] + held["infer"]
    assert len(set(every)) == 3, held  # no GPU given twice
    assert set(every) <= set(share), (held, share)
    pods = {p["name"]: p for p in result["pods"] if p["namespace"] == ns}
    (container,) = pods["trainer"]["containers"]
    assert container["name"] == "cuda" and container["dynamic_resources"] == []
    assert [(d["resource_name"], d["device_ids"]) for d in container["devices"]] == [
        (dp.RESOURCE, held["trainer"])
    ]
    numa = ps.numa_of(dp.fixture_gpus("dgx-h100"))
    assert container["devices"][0]["numa_nodes"] == sorted({numa[i] for i in held["trainer"]})
    # each node's socket answers for its own pods only
    assert ns not in {p["namespace"] for p in pr.read_pod_resources(str(ps.socket_path(OTHER_NODE)))["pods"]}

    kubectl("-n", ns, "delete", "pod", "infer", "--wait=false")
    kubectl.wait_for(
        lambda: sorted(ours(pr.read_pod_resources(socket), ns)) == ["trainer"],
        timeout=90,
        what="the deleted pod to leave the List answer",
    )
    after = module_on_node()
    assert ours(after, ns) == {"trainer": held["trainer"]}  # the other pod keeps its GPUs


PROBE_NODE = "lab-hpod-probe"


def probe_plugin(uuids: list[str]) -> dict:
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "hpod-probe-dp", "namespace": "default"},
        "spec": {
            "selector": {"matchLabels": {"app": "hpod-probe-dp"}},
            "template": {
                "metadata": {"labels": {"app": "hpod-probe-dp"}},
                "spec": {
                    "nodeSelector": {"kubernetes.io/hostname": PROBE_NODE},
                    "containers": [
                        {
                            "name": "plugin",
                            "image": "nvcr.io/nvidia/k8s-device-plugin:v0.20.0",
                            "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": ",".join(uuids)}],
                        }
                    ],
                },
            },
        },
    }


def test_a_pod_keeps_its_gpu_after_the_plugin_stops_advertising_it(lab, kubectl, core_api):
    """What issue 17 is about: the kubelet does not take a device back from a running pod when the
    plugin restarts without it; the node's allocatable drops, the pod still holds the GPU."""
    from lab import nodes

    uuids = [g["uuid"] for g in sorted(dp.fixture_gpus("dgx-h100"), key=lambda g: g["index"])]
    nodes.ensure_node(core_api, PROBE_NODE, "dgx-h100")
    ns = kubectl.namespace(f"hpod-{uuid.uuid4().hex[:6]}")
    socket = str(ps.socket_path(PROBE_NODE))

    def allocatable():
        return kubectl.json("get", "node", PROBE_NODE)["status"].get("allocatable", {}).get(dp.RESOURCE)

    try:
        kubectl("apply", "-f", "-", stdin=json.dumps(probe_plugin(uuids[:3])))
        kubectl.wait_for(lambda: allocatable() == "3", timeout=120, what="3 GPUs advertised")
        pod = gpu_pod("holder", ns, 1)
        pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": PROBE_NODE}
        kubectl("apply", "-f", "-", stdin=json.dumps(pod))
        held = kubectl.wait_for(
            lambda: os.path.exists(socket) and ours(pr.read_pod_resources(socket), ns).get("holder"),
            timeout=90,
            what="the pod's GPU in the probe node's List answer",
        )
        assert held == [uuids[0]]  # the first free in index order
        # the plugin restarts without that GPU (it moves to the host)
        kubectl("apply", "-f", "-", stdin=json.dumps(probe_plugin(uuids[1:3])))
        kubectl.wait_for(lambda: allocatable() == "2", timeout=120, what="2 GPUs advertised")
        assert ours(pr.read_pod_resources(socket), ns) == {"holder": [uuids[0]]}
    finally:
        kubectl("delete", "namespace", ns, "--wait=false", check=False)
        kubectl("-n", "default", "delete", "daemonset", "hpod-probe-dp", "--ignore-not-found", check=False)
        kubectl("delete", "node", PROBE_NODE, "--ignore-not-found", check=False)
    # a node that is gone has no socket any more
    kubectl.wait_for(lambda: not os.path.exists(socket), timeout=60, what="the probe node's socket to go")
