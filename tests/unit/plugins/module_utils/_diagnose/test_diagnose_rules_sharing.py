"""The shortage rule on nodes whose Kubernetes share gpusplit time-slices (their labels say so)."""

from __future__ import annotations

from ansible_collections.gpusplit.k8s.plugins.module_utils._diagnose.report import diagnose
from ansible_collections.gpusplit.k8s.plugins.module_utils._diagnose.rules import SHORTAGE
from ansible_collections.gpusplit.k8s.tests.unit.plugins.module_utils._diagnose.diagnose_scene import (
    node,
    pod,
)

SHARED = "nvidia.com/gpu.shared"
SLICED = {"pool": "nb", "gpusplit.io/time-slicing-replicas": "4"}


def sliced_node(one_per_pod=False):
    labels = dict(
        SLICED, **({"gpusplit.io/time-slicing-fail-requests-greater-than-one": "true"} if one_per_pod else {})
    )
    return node("gpu-a", 0, labels, extra_alloc={SHARED: "8"})


def shared_pod(name, count=1, node_name=None):
    limits = {SHARED: str(count)}
    return pod(
        name, selector={"pool": "nb"}, node_name=node_name, resources={"limits": limits, "requests": limits}
    )


def entry(pods, nodes, name):
    return {e["name"]: e for e in diagnose(pods, nodes)["pods"]}[name]


def test_a_ninth_pod_on_eight_replicas_is_a_shortage_explained_as_time_slicing():
    running = [shared_pod(f"nb-{i}", node_name="gpu-a") for i in range(8)]
    e = entry([*running, shared_pod("nb-8")], [sliced_node()], "nb-8")
    assert e["class"] == SHORTAGE
    assert "gpu-a: nvidia.com/gpu.shared allocatable 8, requested 8, free 0, pod wants 1" in e["summary"]
    assert "time-sliced: gpu-a: nvidia.com/gpu.shared is 2 GPU(s) time-sliced x4" in e["summary"]
    assert "raise gpusplit_sharing.time_slicing.replicas" in e["next"]


def test_more_replicas_than_the_node_has():
    e = entry([shared_pod("big", 9)], [sliced_node()], "big")
    assert e["class"] == SHORTAGE
    assert "the pod asks for 9 nvidia.com/gpu.shared, more replicas than gpu-a has" in e["summary"]
    assert "ask for 1 replica per container" in e["next"]


def test_two_replicas_where_the_plugin_fails_requests_over_one():
    running = [shared_pod(f"nb-{i}", node_name="gpu-a") for i in range(7)]
    e = entry([*running, shared_pod("two", 2)], [sliced_node(one_per_pod=True)], "two")
    assert (
        "gpu-a fails a container asking for more than one replica (failRequestsGreaterThanOne)"
        in e["summary"]
    )


def test_a_node_without_the_labels_is_no_time_slicing():
    plain = node("gpu-b", 1, {"pool": "nb"})
    e = entry([pod("p0", node_name="gpu-b"), pod("p1", selector={"pool": "nb"})], [plain], "p1")
    assert e["class"] == SHORTAGE and "time-sliced" not in e["summary"]


def test_a_mig_profile_no_node_offers():
    mig_node = node("mig-a", 0, {"pool": "nb"}, extra_alloc={"nvidia.com/mig-3g.40gb": "2"})
    limits = {"nvidia.com/mig-2g.20gb": "1"}
    want = pod("want-2g", selector={"pool": "nb"}, resources={"limits": limits, "requests": limits})
    e = entry([want], [mig_node], "want-2g")
    assert e["class"] == SHORTAGE
    assert (
        "no node offers MIG profile nvidia.com/mig-2g.20gb (the nodes offer: nvidia.com/mig-3g.40gb)"
        in e["summary"]
    )
    assert "gpusplit_mig_geometry" in e["next"]
    limits = {"nvidia.com/mig-3g.40gb": "3"}
    big = pod("want-3", selector={"pool": "nb"}, resources={"limits": limits, "requests": limits})
    assert "no node offers" not in entry([big], [mig_node], "want-3")["summary"]
