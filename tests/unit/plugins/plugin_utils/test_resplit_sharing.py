"""A re-split that changes how a node's Kubernetes share is shared: the plan diff sees it, the policies apply."""

from __future__ import annotations

from ansible_collections.gpusplit.k8s.plugins.module_utils._split.planner import plan_node
from ansible_collections.gpusplit.k8s.plugins.plugin_utils import resplit
from ansible_collections.gpusplit.k8s.plugins.plugin_utils import split_render as render
from ansible_collections.gpusplit.k8s.tests.unit.gpufacts import h100

GPUS = [h100(i) for i in range(4)]


def plan_of(sharing=None):
    node = plan_node("node-a", GPUS, "device_plugin", {"host_count": 2}, sharing=sharing)
    return {"nodes": {"node-a": node}, "summary": {}, "warnings": []}


def live_ds(plan):
    return [o for o in render.render_fleet(plan) if o["kind"] == "DaemonSet"]


def held(*device_ids, resource="nvidia.com/gpu"):
    return {
        "available": True,
        "holders": [
            {
                "namespace": "nb",
                "pod": f"p{i}",
                "container": "main",
                "resource_name": resource,
                "device_id": dev,
            }
            for i, dev in enumerate(device_ids)
        ],
    }


def pods(n):
    return [
        {"metadata": {"namespace": "nb", "name": f"p{i}", "uid": f"u{i}"}, "status": {"phase": "Running"}}
        for i in range(n)
    ]


def test_the_live_sharing_is_read_from_the_split_daemonset():
    old = plan_of({"time_slicing": {"replicas": 4}})
    assert resplit.live_shares(old, live_ds(old))["node-a"]["sharing"] == "time-slicing x4"


def test_a_sharing_change_on_a_busy_node_puts_every_holder_in_the_way():
    old = plan_of({"time_slicing": {"replicas": 4}})
    new = plan_of({"time_slicing": {"replicas": 2, "rename": True}})
    k0, k1 = old["nodes"]["node-a"]["kubernetes_uuids"]
    diff = resplit.resplit_diff(new, {"node-a": held(f"{k0}::0", f"{k1}::3")}, live_ds(old), pods=pods(2))
    [node] = diff["nodes"]
    assert node["to_host"] == [] and node["to_kubernetes"] == []
    assert node["sharing"] == {
        "before": "time-slicing x4",
        "after": "time-slicing x2 (nvidia.com/gpu.shared)",
    }
    assert [(h["pod"], h["gpu"]) for h in node["holders"]] == [("p0", k0), ("p1", k1)]
    assert (
        "  sharing:          time-slicing x4 -> time-slicing x2 (nvidia.com/gpu.shared)"
        in resplit.resplit_table(diff)
    )
    [msg] = resplit.resplit_refusals(diff, "refuse")
    assert "The node's sharing changes (time-slicing x4 -> time-slicing x2 (nvidia.com/gpu.shared))" in msg
    assert "nb/p0 holds GPU" in msg and "Nothing was changed" in msg
    assert resplit.resplit_refusals(diff, "evict") == []
    assert resplit.fence_nodes(diff) == ["node-a"]


def test_sharing_switched_on_where_no_pod_holds_a_gpu_only_changes():
    old, new = plan_of(), plan_of({"time_slicing": {"replicas": 4}})
    diff = resplit.resplit_diff(new, {"node-a": held()}, live_ds(old), pods=[])
    [node] = diff["nodes"]
    assert node["sharing"] == {"before": "none", "after": "time-slicing x4"}
    assert node["holders"] == [] and resplit.resplit_refusals(diff, "refuse") == []


def test_the_same_sharing_is_no_change_and_replica_ids_name_their_gpu():
    plan = plan_of({"time_slicing": {"replicas": 4}})
    k0 = plan["nodes"]["node-a"]["kubernetes_uuids"][0]
    diff = resplit.resplit_diff(plan, {"node-a": held(f"{k0}::2")}, live_ds(plan), pods=pods(1))
    assert diff["nodes"] == [] and diff["unchanged"] == ["node-a"]
    holders = resplit.device_plugin_holders(plan["nodes"]["node-a"], held(f"{k0}::2"), {})
    assert holders[0]["gpu"] == k0


def test_a_sharing_change_where_the_pod_resources_were_not_read_is_refused():
    old, new = plan_of(), plan_of({"time_slicing": {"replicas": 4}})
    diff = resplit.resplit_diff(new, {}, live_ds(old), pods=[], unread={"node-a": "no kubelet socket"})
    assert [u["node"] for u in diff["unread"]] == ["node-a"]
