"""A MIG geometry change on a busy node (mode device_plugin): the plan diff counts it, so refuse, evict and wait
apply to exactly the pods on the GPU whose geometry changes."""

from __future__ import annotations

import pytest

from ansible_collections.gpusplit.k8s.plugins.module_utils._split.planner import plan_node
from ansible_collections.gpusplit.k8s.plugins.plugin_utils import resplit
from ansible_collections.gpusplit.k8s.plugins.plugin_utils import split_render as render
from ansible_collections.gpusplit.k8s.tests.unit.gpufacts import h100

GPUS = [h100(i) for i in range(4)]
UUIDS = [g["uuid"] for g in GPUS]


def plan_of(geometry=None):
    node = plan_node(
        "node-a", GPUS, "device_plugin", {"host_count": 2}, mig_strategy="mixed", mig_geometry=geometry
    )
    return {"nodes": {"node-a": node}, "summary": {}, "warnings": []}


def held(*device_ids):
    return {
        "available": True,
        "holders": [
            {
                "namespace": "ml",
                "pod": f"p{i}",
                "container": "c",
                "resource_name": "nvidia.com/gpu",
                "device_id": d,
            }
            for i, d in enumerate(device_ids)
        ],
    }


PODS = [
    {"metadata": {"namespace": "ml", "name": f"p{i}", "uid": f"u{i}"}, "status": {"phase": "Running"}}
    for i in (0, 1)
]


def diff_of(geometry):
    old = plan_of()
    live = [o for o in render.render_fleet(old) if o["kind"] == "DaemonSet"]
    # p0 holds GPU 2, p1 GPU 3; the geometry goes to GPU 3 only
    return resplit.resplit_diff(plan_of(geometry), {"node-a": held(UUIDS[2], UUIDS[3])}, live, pods=PODS)


def test_the_pod_on_the_gpu_whose_geometry_changes_is_in_the_way_and_no_other():
    diff = diff_of({UUIDS[3]: ["3g.40gb", "3g.40gb"]})
    [node] = diff["nodes"]
    assert node["to_host"] == [] and node["to_kubernetes"] == [] and node["sharing"] is None
    assert node["mig"] == [{"uuid": UUIDS[3], "index": 3, "now": None, "want": ["3g.40gb", "3g.40gb"]}]
    assert [(h["pod"], h["gpu"]) for h in node["holders"]] == [("p1", UUIDS[3])]
    assert diff["holders"] == [{"namespace": "ml", "name": "p1", "uid": "u1"}]  # what evict evicts
    assert (
        f"MIG geometry:     GPU 3 ({UUIDS[3]}): MIG disabled -> [3g.40gb, 3g.40gb]"
        in resplit.resplit_table(diff)
    )
    [error] = resplit.resplit_refusals(diff, "refuse")
    assert error.startswith(f"node-a: ml/p1 holds GPU 3 ({UUIDS[3]}). The MIG geometry changes (GPU 3")
    assert "gpusplit_resplit_policy=evict" in error and error.endswith("Nothing was changed.")
    assert resplit.resplit_refusals(diff, "evict") == [] and resplit.resplit_refusals(diff, "wait") == []


def test_no_geometry_change_no_pod_in_the_way():
    diff = diff_of(None)
    assert diff["nodes"] == [] and diff["holders"] == [] and diff["unchanged"] == ["node-a"]


@pytest.mark.parametrize("geometry", [{UUIDS[2]: ["7g.80gb"]}, {"all": ["7g.80gb"]}])
def test_an_idle_node_with_a_geometry_change_is_listed_without_holders(geometry):
    old = plan_of()
    live = [o for o in render.render_fleet(old) if o["kind"] == "DaemonSet"]
    diff = resplit.resplit_diff(plan_of(geometry), {"node-a": held()}, live, pods=[])
    [node] = diff["nodes"]
    assert node["holders"] == [] and [c["index"] for c in node["mig"]] == sorted(
        {2} | ({3} if "all" in geometry else set())
    )
    assert resplit.resplit_refusals(diff, "refuse") == []
