"""Scheduling helpers over plain API dicts: tolerations, node selection, what a pod asks for."""

from __future__ import annotations

import pytest

from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.scheduling import (
    matches_node,
    node_taints,
    pod_gpu_requests,
    pod_key,
    selector_text,
    taint_text,
    term_matches,
    tolerates,
    toleration_for,
    untolerated_taints,
    wants_gpu,
)

GPU = "nvidia.com/gpu"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


def node(name, labels=None, taints=(), unschedulable=False):
    spec = {"taints": list(taints)} if taints else {}
    if unschedulable:
        spec["unschedulable"] = True
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": spec,
    }


def pod(name, gpus=1, node_name=None, extra_spec=None):
    container = {"name": "main", "image": "registry.k8s.io/pause:3.10"}
    if gpus:
        container["resources"] = {"limits": {GPU: str(gpus)}, "requests": {GPU: str(gpus)}}
    spec = {"containers": [container]}
    if node_name:
        spec["nodeName"] = node_name
    spec.update(extra_spec or {})
    return {"metadata": {"name": name, "namespace": "diag"}, "spec": spec, "status": {"phase": "Pending"}}


@pytest.mark.parametrize(
    ("toleration", "taint", "expected"),
    [
        ({"key": "nvidia.com/gpu", "operator": "Exists"}, GPU_TAINT, True),
        ({"operator": "Exists"}, GPU_TAINT, True),
        ({"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}, GPU_TAINT, True),
        ({"key": "nvidia.com/gpu", "value": "absent"}, GPU_TAINT, False),
        ({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"}, GPU_TAINT, False),
        ({"key": "other", "operator": "Exists"}, GPU_TAINT, False),
        (
            {"key": "level", "operator": "Gt", "value": "3"},
            {"key": "level", "value": "5", "effect": "NoSchedule"},
            True,
        ),
        (
            {"key": "level", "operator": "Lt", "value": "3"},
            {"key": "level", "value": "5", "effect": "NoSchedule"},
            False,
        ),
        (
            {"key": "level", "operator": "Lt", "value": "x"},
            {"key": "level", "value": "5", "effect": "NoSchedule"},
            False,
        ),
    ],
)
def test_tolerates(toleration, taint, expected):
    assert tolerates(toleration, taint) is expected


def test_prefer_no_schedule_never_blocks():
    assert untolerated_taints([], [{"key": "k", "effect": "PreferNoSchedule"}]) == []


def test_node_affinity_and_fields():
    n = node("gpu-7", {"nvidia.com/gpu.count": "8", "zone": "b"})

    def with_affinity(*exprs, fields=()):
        term = {"matchExpressions": list(exprs)}
        if fields:
            term["matchFields"] = list(fields)
        return pod(
            "p",
            extra_spec={
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
                    }
                }
            },
        )

    assert matches_node(with_affinity({"key": "zone", "operator": "In", "values": ["a", "b"]}), n)
    assert not matches_node(with_affinity({"key": "zone", "operator": "NotIn", "values": ["b"]}), n)
    assert matches_node(with_affinity({"key": "nvidia.com/gpu.count", "operator": "Gt", "values": ["4"]}), n)
    assert not matches_node(with_affinity({"key": "missing", "operator": "Exists"}), n)
    assert matches_node(
        with_affinity(fields=[{"key": "metadata.name", "operator": "In", "values": ["gpu-7"]}]), n
    )
    assert not matches_node(pod("p", node_name="gpu-8"), n)


def test_pod_gpu_requests_counts_init_containers_and_sidecars():
    p = pod("p", gpus=0)
    p["spec"]["containers"] = [
        {"name": "a", "resources": {"limits": {GPU: "1"}}},
        {"name": "b", "resources": {"requests": {GPU: "1"}, "limits": {GPU: "1"}}},
    ]
    p["spec"]["initContainers"] = [
        {"name": "side", "restartPolicy": "Always", "resources": {"limits": {GPU: "1"}}},
        {"name": "warm", "resources": {"limits": {GPU: "4", "nvidia.com/mig-1g.10gb": "2"}}},
    ]
    assert pod_gpu_requests(p) == {GPU: 5, "nvidia.com/mig-1g.10gb": 2}
    assert wants_gpu(p)
    assert not wants_gpu(pod("cpu", gpus=0))
    assert wants_gpu(pod("dra", gpus=0, extra_spec={"resourceClaims": [{"name": "x"}]}))


@pytest.mark.parametrize(
    "taint",
    [
        GPU_TAINT,
        {"key": "gpusplit.io/unhealthy", "effect": "NoExecute"},
        {"key": "k", "value": "", "effect": "NoSchedule"},
    ],
)
def test_toleration_for_is_the_narrowest_that_tolerates(taint):
    tol = toleration_for(taint)
    assert tolerates(tol, taint)
    assert list(tol) == (
        ["key", "operator", "value", "effect"] if taint.get("value") else ["key", "operator", "effect"]
    )
    assert not tolerates(toleration_for(dict(taint, key="other")), taint)


def test_cordon_taint_and_taint_text():
    assert node_taints(node("n", unschedulable=True)) == [
        {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
    ]
    assert node_taints(node("n", taints=[GPU_TAINT])) == [GPU_TAINT]
    assert taint_text(GPU_TAINT) == "nvidia.com/gpu=present:NoSchedule"
    assert taint_text({"key": "k", "effect": "NoExecute"}) == "k:NoExecute"


def test_empty_term_matches_no_node_and_selector_text():
    assert not term_matches({}, node("n"))
    p = pod(
        "p",
        node_name="n1",
        extra_spec={
            "nodeSelector": {"pool": "x"},
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]},
                            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]},
                        ]
                    }
                }
            },
        },
    )
    assert selector_text(p) == (
        "pool=x, required nodeAffinity: (zone In [a, b]) OR (field metadata.name In [n1]), nodeName=n1"
    )
    assert selector_text(pod("q")) == "(none)"
    assert pod_key(p) == "diag/p"
    assert pod_key({"metadata": {"name": "x"}}) == "default/x"
