"""Builders for the diagnose tests: the lab scene the captured scheduler messages came from.

The messages in tests/fixtures/scheduler/*.txt were written by tests/integration/test_diagnose_lab.py
from the real kube-scheduler v1.37.2; the objects here rebuild the scene those messages came
from (two nodes of our own among others: A with 2 GPUs behind the GPU taint, B with 1 GPU).
"""

from __future__ import annotations

from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[4] / "fixtures" / "scheduler"
GPU = "nvidia.com/gpu"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
PRIVATE = {"key": "gpusplit.io/diag-run", "value": "r1", "effect": "NoSchedule"}
PRIVATE_TOL = {"key": "gpusplit.io/diag-run", "operator": "Equal", "value": "r1", "effect": "NoSchedule"}
GPU_TOL = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def fixture(name):
    path = FIXTURES / f"{name}.txt"
    if not path.exists():
        pytest.skip(f"{path.name} not captured yet (run the lab test with GPUSPLIT_CAPTURE_SCHEDULER=1)")
    return path.read_text().strip()


def node(name, gpus=0, labels=None, taints=(), unschedulable=False, extra_alloc=None):
    alloc = {"cpu": "64", "memory": "512Gi", "pods": "110"}
    if gpus is not None:
        alloc[GPU] = str(gpus)
    alloc.update(extra_alloc or {})
    spec = {"taints": list(taints)} if taints else {}
    if unschedulable:
        spec["unschedulable"] = True
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": spec,
        "status": {"allocatable": alloc, "capacity": dict(alloc)},
    }


def pod(
    name,
    ns="diag",
    gpus=1,
    selector=None,
    tolerations=(PRIVATE_TOL, GPU_TOL),
    node_name=None,
    phase=None,
    message=None,
    extra_spec=None,
    resources=None,
):
    container = {"name": "main", "image": "registry.k8s.io/pause:3.10"}
    if resources is not None:
        container["resources"] = resources
    elif gpus:
        container["resources"] = {"limits": {GPU: str(gpus)}, "requests": {GPU: str(gpus)}}
    spec = {"containers": [container], "tolerations": list(tolerations)}
    if selector:
        spec["nodeSelector"] = selector
    if node_name:
        spec["nodeName"] = node_name
    spec.update(extra_spec or {})
    status = {"phase": phase or ("Running" if node_name else "Pending")}
    if message:
        status["conditions"] = [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
        ]
    return {"metadata": {"name": name, "namespace": ns, "uid": f"uid-{name}"}, "spec": spec, "status": status}


def event(p, message, when="2026-11-29T07:00:00Z"):
    return {
        "metadata": {"name": f"{p['metadata']['name']}.1", "namespace": p["metadata"]["namespace"]},
        "involvedObject": {
            "kind": "Pod",
            "name": p["metadata"]["name"],
            "namespace": p["metadata"]["namespace"],
        },
        "reason": "FailedScheduling",
        "message": message,
        "lastTimestamp": when,
    }


def scene_nodes():
    """The lab scene: our A and B, six other nodes (untainted lab nodes, one tainted)."""
    a = node("diag-a", 2, {"gpusplit.io/diag-run": "r1", "gpusplit.io/diag-role": "a"}, [PRIVATE, GPU_TAINT])
    b = node("diag-b", 1, {"gpusplit.io/diag-run": "r1", "gpusplit.io/diag-role": "b"}, [PRIVATE])
    others = [node(f"lab-{i}", 2, {"nvidia.com/gpu.product": "NVIDIA-H100"}) for i in range(6)]
    others.append(node("other-tainted", 8, {}, [GPU_TAINT]))
    return [a, b, *others]


ROLE_A = {"gpusplit.io/diag-run": "r1", "gpusplit.io/diag-role": "a"}
ROLE_B = {"gpusplit.io/diag-run": "r1", "gpusplit.io/diag-role": "b"}


def only(report, name):
    entries = {e["name"]: e for e in report["pods"]}
    return entries[name]


def podgroup(name, min_count, ns="diag", conditions=None):
    pg = {
        "metadata": {"name": name, "namespace": ns},
        "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}},
    }
    if conditions:
        pg["status"] = {"conditions": conditions}
    return pg


def member(name, group, **kw):
    return pod(name, extra_spec={"schedulingGroup": {"podGroupName": group}}, **kw)


def dra_objects(
    run="r1", node_name="diag-a", taint_rule=True, slice_taints=(), claim_selectors=(), tolerations=()
):
    cls = {
        "metadata": {"name": "diag-gpu"},
        "spec": {
            "selectors": [
                {
                    "cel": {
                        "expression": f'device.driver == "gpu.nvidia.com" && device.attributes["gpusplit.io"].run == "{run}"'
                    }
                }
            ]
        },
    }
    devices = [
        {
            "name": f"gpu-{i}",
            "attributes": {"gpusplit.io/run": {"string": run}, "uuid": {"string": f"GPU-{i}"}},
        }
        for i in range(2)
    ]
    for dev in devices:
        if slice_taints:
            dev["taints"] = list(slice_taints)
    sl = {
        "metadata": {"name": f"{node_name}-gpus"},
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": node_name,
            "pool": {"name": node_name},
            "devices": devices,
        },
    }
    rules = []
    if taint_rule:
        rules.append(
            {
                "metadata": {"name": f"{node_name}-unhealthy"},
                "spec": {
                    "deviceSelector": {"driver": "gpu.nvidia.com", "pool": node_name},
                    "taint": {"key": "gpusplit.io/unhealthy", "value": "Degraded", "effect": "NoSchedule"},
                },
            }
        )
    exactly = {"deviceClassName": "diag-gpu"}
    if claim_selectors:
        exactly["selectors"] = [{"cel": {"expression": e}} for e in claim_selectors]
    if tolerations:
        exactly["tolerations"] = list(tolerations)
    claim = {
        "metadata": {"name": "claim", "namespace": "diag"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}},
    }
    return {"classes": [cls], "slices": [sl], "rules": rules, "claims": [claim], "templates": []}


def claim_pod(name="want-dra", selector=ROLE_A, message=None):
    return pod(
        name,
        gpus=0,
        selector=selector,
        message=message,
        extra_spec={"resourceClaims": [{"name": "gpu", "resourceClaimName": "claim"}]},
    )
