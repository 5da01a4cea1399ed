"""The re-split's plan diff, its policies and its fences (plugins/plugin_utils/resplit.py)."""

from __future__ import annotations

import pytest

from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.read import project
from ansible_collections.gpusplit.k8s.plugins.module_utils._split.planner import plan_node
from ansible_collections.gpusplit.k8s.plugins.plugin_utils import resplit, resplit_inventory
from ansible_collections.gpusplit.k8s.plugins.plugin_utils import split_render as render
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.resplit import ResplitError
from ansible_collections.gpusplit.k8s.tests.unit.fieldreads import (
    field_paths,
    query_fields,
    recorded,
    uncovered,
)
from ansible_collections.gpusplit.k8s.tests.unit.gpufacts import h100


def gpu(i, processes=()):
    return h100(i, processes)


GPUS = [gpu(i) for i in range(8)]


def uuid(i):
    return GPUS[i]["uuid"]


def plan_of(split, mode="device_plugin", gpus=GPUS, host="node-a"):
    return {"nodes": {host: plan_node(host, gpus, mode, split)}, "summary": {}, "warnings": []}


def live_ds(plan):
    return render.render_fleet(plan)[-1:]


def answer(*holds):
    """A gpu_pod_resources result: (namespace, pod, device id) per held device."""
    return {
        "available": True,
        "holders": [
            {
                "namespace": ns,
                "pod": pod,
                "container": "main",
                "resource_name": "nvidia.com/gpu",
                "device_id": dev,
            }
            for ns, pod, dev in holds
        ],
    }


def pod(ns, name, phase="Running", owner=None):
    meta = {"namespace": ns, "name": name, "uid": f"uid-{name}"}
    if owner:
        meta["ownerReferences"] = [{"kind": owner[0], "name": owner[1], "controller": True}]
    return {"metadata": meta, "status": {"phase": phase}}


def test_the_live_share_is_read_from_the_split_daemonset():
    old = plan_of({"host_count": 2})
    shares = resplit.live_shares(old, live_ds(old))
    assert shares["node-a"] == {
        "kubernetes": [uuid(i) for i in range(2, 8)],
        "source": "split DaemonSet",
        "sharing": "none",
    }
    assert resplit.live_shares(old, [])["node-a"]["kubernetes"] is None


def test_a_gpu_moving_to_the_host_held_by_a_pod_is_named_with_its_owner():
    old, new = plan_of({"host_count": 2}), plan_of({"host_indices": [0, 1, 5]})
    diff = resplit.resplit_diff(
        new,
        {"node-a": answer(("team", "train-0", uuid(5)), ("team", "infer-0", uuid(3)))},
        live_ds(old),
        pods=[pod("team", "train-0", owner=("Job", "train")), pod("team", "infer-0")],
    )
    [node] = diff["nodes"]
    assert [m["index"] for m in node["to_host"]] == [5]
    assert node["to_kubernetes"] == []
    assert [(h["pod"], h["index"], h["owner"]) for h in node["holders"]] == [("train-0", 5, "Job/train")]
    assert diff["holders"] == [{"namespace": "team", "name": "train-0", "uid": "uid-train-0"}]
    table = resplit.resplit_table(diff)
    assert "to the host:      5 (" in table and "team/train-0, owner Job/train" in table
    [msg] = resplit.resplit_refusals(diff, "refuse")
    assert "team/train-0 holds GPU 5" in msg and "Nothing was changed" in msg and "infer-0" not in msg
    assert resplit.resplit_refusals(diff, "evict") == []
    assert resplit.resplit_refusals(diff, "wait") == []


def test_device_ids_may_be_indices_and_finished_pods_do_not_count():
    old, new = plan_of({"host_count": 2}), plan_of({"host_count": 4})
    diff = resplit.resplit_diff(
        new,
        {"node-a": answer(("a", "p", "2"), ("a", "done", "3"))},
        live_ds(old),
        pods=[pod("a", "p"), pod("a", "done", phase="Succeeded")],
    )
    [node] = diff["nodes"]
    assert [m["index"] for m in node["to_host"]] == [2, 3]
    assert [h["pod"] for h in node["holders"]] == ["p"]


def test_a_pod_the_device_plugin_gave_a_host_gpu_is_in_the_way_whatever_the_live_split_says():
    # the kubelet keeps a device the plugin no longer advertises (k8s-device-plugin#313): a run that re-applied
    # the split plugin with the new share and stopped before the host side (policy wait, timed out) leaves
    # the live DaemonSet already at the new share while the pod still holds the GPU going to the host
    new = plan_of({"host_count": 3})
    for live in (live_ds(new), live_ds(plan_of({"host_count": 2}))):
        diff = resplit.resplit_diff(
            new, {"node-a": answer(("team", "train-0", uuid(2)))}, live, pods=[pod("team", "train-0")]
        )
        [node] = diff["nodes"]
        assert [(h["pod"], h["index"]) for h in node["holders"]] == [("train-0", 2)]
        assert diff["holders"] == [{"namespace": "team", "name": "train-0", "uid": "uid-train-0"}]
        [msg] = resplit.resplit_refusals(diff, "refuse")
        assert "team/train-0 holds GPU 2" in msg and "Nothing was changed" in msg
        assert "no node's split changes" not in resplit.resplit_table(diff)


def test_a_claim_on_a_gpu_that_was_the_hosts_already_is_not_this_changes_business():
    # a diagnostic claim tolerating the host-share taint (mode dra) is meant to reach a host GPU
    new = plan_of({"host_indices": [0, 1, 4]}, mode="dra")
    rules = [
        {
            "metadata": {"annotations": {"gpusplit.io/gpu-uuid": uuid(i)}},
            "spec": {"deviceSelector": {"driver": "gpu.nvidia.com", "pool": "node-a", "device": f"gpu-{i}"}},
        }
        for i in (0, 1)
    ]
    claim = gpu4_claim()
    claim["status"]["allocation"]["devices"]["results"][0]["device"] = "gpu-0"
    diff = resplit.resplit_diff(new, {}, [], rules, [pod("ml", "w-0")], [claim])
    [node] = diff["nodes"]
    assert [m["index"] for m in node["to_host"]] == [4] and node["holders"] == []
    assert resplit.resplit_refusals(diff) == []


def test_unchanged_nodes_are_only_counted():
    plan = plan_of({"host_count": 2})
    diff = resplit.resplit_diff(
        plan, {"node-a": answer(("a", "p", uuid(4)))}, live_ds(plan), pods=[pod("a", "p")]
    )
    assert diff["nodes"] == [] and diff["unchanged"] == ["node-a"]
    assert "no node's split changes" in resplit.resplit_table(diff)


def test_without_a_live_split_a_held_gpu_outside_the_new_share_still_stops_the_run():
    new = plan_of({"host_count": 3})
    diff = resplit.resplit_diff(new, {"node-a": answer(("a", "p", uuid(1)))}, [], pods=[pod("a", "p")])
    [node] = diff["nodes"]
    assert node["kubernetes_before"] is None and [m["index"] for m in node["to_host"]] == [1]
    assert resplit.resplit_refusals(diff) and "unknown (no split yet)" in resplit.resplit_table(diff)


def test_a_host_process_on_a_gpu_going_to_kubernetes_is_refused_unless_ignored():
    gpus = [
        gpu(i, [{"pid": 77, "name": "trainer", "in_container": False}] if i == 1 else []) for i in range(8)
    ]
    old, new = plan_of({"host_count": 2}, gpus=gpus), plan_of({"host_count": 1}, gpus=gpus)
    diff = resplit.resplit_diff(
        new, {}, live_ds(old), facts={"node-a": gpus}, services={"node-a": ["trainer.service"]}
    )
    [node] = diff["nodes"]
    assert [m["index"] for m in node["to_kubernetes"]] == [1]
    [msg] = resplit.resplit_refusals(diff, "evict")
    assert "pid 77 (trainer) on GPU 1" in msg and "trainer.service" in msg
    assert resplit.resplit_refusals(diff, "evict", "ignore") == []


def test_a_container_process_no_pod_holds_is_warned_about():
    gpus = [gpu(i, [{"pid": 9, "name": "python", "in_container": True}] if i == 6 else []) for i in range(8)]
    old, new = plan_of({"host_count": 2}, gpus=gpus), plan_of({"host_indices": [0, 1, 6]}, gpus=gpus)
    diff = resplit.resplit_diff(new, {"node-a": answer()}, live_ds(old), facts={"node-a": {"gpus": gpus}})
    assert any("container process 9 (python) that no pod is known to hold" in w for w in diff["warnings"])


def gpu4_claim():
    """A ResourceClaim allocated gpu-4 of node-a, reserved for pod ml/w-0."""
    return {
        "metadata": {"namespace": "ml", "name": "c1"},
        "status": {
            "allocation": {
                "devices": {"results": [{"driver": "gpu.nvidia.com", "pool": "node-a", "device": "gpu-4"}]}
            },
            "reservedFor": [{"resource": "pods", "name": "w-0", "uid": "u1"}],
        },
    }


def test_dra_holders_come_from_allocated_claims():
    new = plan_of({"host_indices": [0, 1, 4]}, mode="dra")
    claim = gpu4_claim()
    rules = [
        {
            "metadata": {"annotations": {"gpusplit.io/gpu-uuid": uuid(i)}},
            "spec": {"deviceSelector": {"driver": "gpu.nvidia.com", "pool": "node-a", "device": f"gpu-{i}"}},
        }
        for i in (0, 1)
    ]
    diff = resplit.resplit_diff(new, {}, [], rules, [pod("ml", "w-0")], [claim])
    [node] = diff["nodes"]
    assert node["before_source"] == "DeviceTaintRules"
    assert [m["index"] for m in node["to_host"]] == [4]
    [holder] = node["holders"]
    assert (holder["pod"], holder["claim"], holder["index"], holder["via"]) == (
        "w-0",
        "c1",
        4,
        "ResourceClaim",
    )
    assert resplit.dra_fence_devices(diff, new) == [
        {"host": "node-a", "node": "node-a", "index": 4, "uuid": uuid(4), "pci_bus_id": "00000000:58:00.0"}
    ]


def full_pod(ns, name, phase="Running", owner=None):
    """``pod(...)`` with what a live Pod carries besides: gpu_resplit's query keeps only part of it."""
    base = pod(ns, name, phase, owner)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            **base["metadata"],
            "labels": {"app": name},
            "annotations": {"kubectl.kubernetes.io/restartedAt": "2026-12-01T10:00:00Z"},
            "resourceVersion": "77",
            "managedFields": [
                {"manager": "kube-scheduler", "operation": "Update", "fieldsV1": {"f:status": {}}}
            ],
        },
        "spec": {
            "nodeName": "node-a",
            "containers": [
                {"name": "main", "image": "cuda:12", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
            ],
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
        },
        "status": {
            **base["status"],
            "hostIP": "10.0.0.1",
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


POD_FIELDS = query_fields("roles/gpu_resplit/tasks/resplit.yml", "pods")
DS_FIELDS = query_fields("roles/gpu_resplit/tasks/resplit.yml", "daemonsets")


def test_the_pods_and_daemonsets_queries_keep_every_field_resplit_diff_reads():
    """gpu_resplit reads every pod and its split DaemonSets with only the queries' fields (cluster_read
    ``fields``): the diff given those objects reads nothing else of them, and comes out as on whole
    objects (the live share, owners, phases, uids, and the pods a claim is reserved for)."""
    old, new = plan_of({"host_count": 2}), plan_of({"host_indices": [0, 1, 5]})
    dra_new = plan_of({"host_indices": [0, 1, 4]}, mode="dra")
    claim = gpu4_claim()
    pods = [
        full_pod("team", "train-0", owner=("Job", "train")),
        full_pod("team", "infer-0"),
        full_pod("team", "done", phase="Succeeded"),
        full_pod("ml", "w-0", owner=("StatefulSet", "w")),
    ]
    held = {
        "node-a": answer(("team", "train-0", uuid(5)), ("team", "done", uuid(5)), ("team", "infer-0", "3"))
    }

    daemonsets = [
        {**ds, "metadata": {**ds["metadata"], "uid": "u", "managedFields": [{}]}} for ds in live_ds(old)
    ]

    def diffs(live, live_daemonsets):
        return (
            resplit.resplit_diff(new, held, live_daemonsets, pods=live),
            resplit.resplit_diff(dra_new, {}, [], [], live, [claim]),
        )

    watched, reads = recorded(pods)
    watched_ds, ds_reads = recorded(daemonsets)
    whole = diffs(watched, watched_ds)
    assert whole[0]["nodes"][0]["kubernetes_before"] == [uuid(i) for i in range(2, 8)]
    assert [(h["pod"], h["owner"]) for h in whole[0]["nodes"][0]["holders"]] == [("train-0", "Job/train")]
    assert whole[0]["holders"] == [{"namespace": "team", "name": "train-0", "uid": "uid-train-0"}]
    assert [(h["pod"], h["owner"]) for h in whole[1]["nodes"][0]["holders"]] == [("w-0", "StatefulSet/w")]
    assert uncovered(reads, POD_FIELDS) == []
    assert uncovered(ds_reads, DS_FIELDS) == []
    kept = [project(p, field_paths(POD_FIELDS)) for p in pods]
    kept_ds = [project(ds, field_paths(DS_FIELDS)) for ds in daemonsets]
    assert not any("spec" in p or "managedFields" in p["metadata"] for p in kept)
    assert not any("uid" in ds["metadata"] or "selector" in ds["spec"] for ds in kept_ds)
    assert diffs(kept, kept_ds) == whole


def test_the_fence_prunes_only_the_fenced_nodes_daemonsets():
    prune = resplit.fence_prune(plan_of({"host_count": 2}), ["node-a", "elsewhere"])
    assert prune == [
        {
            "api_version": "apps/v1",
            "kind": "DaemonSet",
            "label_selector": "app.kubernetes.io/managed-by=gpusplit,app.kubernetes.io/name=gpusplit-device-plugin,"
            "gpusplit.io/node in (node-a)",
        }
    ]
    assert resplit.fence_prune(plan_of({"host_count": 2}), ["elsewhere"]) == []


def test_unknown_policies_are_refused():
    with pytest.raises(ResplitError, match="gpusplit_resplit_policy: 'drain'"):
        resplit.resplit_refusals({"nodes": []}, "drain")
    with pytest.raises(ResplitError, match="gpusplit_resplit_host_processes"):
        resplit.resplit_refusals({"nodes": []}, "refuse", "kill")


@pytest.mark.parametrize(
    ("host_vars", "want", "why"),
    [
        # the discovery's reading in its own call
        (
            {"gpu_discovery_result": {"pod_resources": answer(("a", "p", "2"))}},
            answer(("a", "p", "2")),
            None,
        ),
        # no kubelet socket yet: an answer (nobody can hold a GPU through a kubelet that is not there)
        ({"gpu_discovery_result": {"pod_resources": {"available": False}}}, {"available": False}, None),
        # a failed reading is never taken for "nobody holds a GPU"; the reason is kept
        (
            {"gpu_discovery_result": {"pod_resources": {"available": False, "error": "permission denied"}}},
            None,
            "could not read them: permission denied",
        ),
        # the discovery was told not to read them
        ({"gpu_discovery_result": {}}, None, "gpusplit_discovery_pod_resources is false"),
        # no discovery on the host in this run
        ({}, None, "run it on the host first"),
        # an earlier version's second reading (gpu_resplit_pod_resources) is not this run's answer
        ({"gpu_resplit_pod_resources": answer(("a", "q", "3"))}, None, "run it on the host first"),
    ],
)
def test_the_pod_resources_of_a_host_come_from_the_discovery(host_vars, want, why):
    assert resplit_inventory.pod_resources_of(host_vars) == want
    unread = resplit_inventory.pod_resources_unread(host_vars)
    assert (unread is None) == (why is None)
    if why:
        assert why in unread


def unread_vars(error="permission denied"):
    return {
        "node-a": {
            "gpu_discovery_result": {"pod_resources": {"available": False, "error": error}},
            "gpusplit_host_services": [],
        }
    }


@pytest.mark.parametrize("policy", ["refuse", "evict", "wait"])
def test_a_gpu_leaving_kubernetes_where_the_pod_resources_were_not_read_is_refused(policy):
    old, new = plan_of({"host_count": 2}), plan_of({"host_indices": [0, 1, 5]})
    diff = resplit_inventory.resplit_from_inventory(new, unread_vars(), live_ds(old), pods=[])
    assert diff["unread"] == [
        {
            "node": "node-a",
            "host": "node-a",
            "reason": resplit_inventory.pod_resources_unread(unread_vars()["node-a"]),
        }
    ]
    assert "node-a: pod-resources not read" in diff["table"] and "permission denied" in diff["table"]
    [msg] = resplit.resplit_refusals(diff, policy)
    assert msg.startswith("node-a: a GPU may leave the node's Kubernetes share")
    assert (
        "permission denied" in msg and "gpusplit_pod_resources_socket" in msg and "Nothing was changed" in msg
    )


def test_no_live_split_and_a_host_share_counts_as_a_gpu_that_may_leave():
    # the first split of a node: whatever the stock plugin gave a pod may be in the host share
    diff = resplit_inventory.resplit_from_inventory(
        plan_of({"host_count": 2}), unread_vars("timed out"), [], pods=[]
    )
    assert [u["node"] for u in diff["unread"]] == ["node-a"]
    assert "timed out" in resplit.resplit_refusals(diff)[0]


@pytest.mark.parametrize(
    ("old_split", "new_split"),
    [
        ({"host_count": 2}, {"host_count": 2}),  # nothing moves
        ({"host_count": 2}, {"host_count": 1}),  # a GPU goes to Kubernetes only
        (None, {"host_count": 0}),  # no live split, and every GPU goes to Kubernetes
    ],
)
def test_an_unread_host_where_no_gpu_leaves_kubernetes_goes_on(old_split, new_split):
    live = live_ds(plan_of(old_split)) if old_split else []
    diff = resplit_inventory.resplit_from_inventory(plan_of(new_split), unread_vars(), live, pods=[])
    assert diff["unread"] == []
    assert resplit.resplit_refusals(diff, "refuse", "ignore") == []


def test_the_diff_from_the_inventory_takes_the_discoverys_reading():
    old, new = plan_of({"host_count": 2}), plan_of({"host_indices": [0, 1, 5]})
    hostvars = {
        "node-a": {
            "gpu_discovery_result": {"pod_resources": answer(("team", "train-0", uuid(5)))},
            "gpusplit_host_services": [],
        }
    }
    diff = resplit_inventory.resplit_from_inventory(
        new, hostvars, live_ds(old), pods=[pod("team", "train-0")]
    )
    assert diff["holders"] == [{"namespace": "team", "name": "train-0", "uid": "uid-train-0"}]
