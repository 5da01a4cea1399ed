"""gpu_pending_diagnose reads PodGroups and DeviceTaintRules in the version the API server serves (discovery)."""

from __future__ import annotations

import pytest
from kubernetes.client.rest import ApiException

from ansible_collections.gpusplit.k8s.plugins.modules import gpu_pending_diagnose as mod

GANG_POD = {
    "metadata": {"namespace": "ns", "name": "w-0"},
    "spec": {
        "schedulingGroup": {"podGroupName": "w"},
        "resourceClaims": [{"name": "gpu", "resourceClaimName": "c"}],
        "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
    },
    "status": {
        "phase": "Pending",
        "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
    },
}


def resources(group_version, *kinds):
    return {"groupVersion": group_version, "resources": [{"name": k.lower() + "s", "kind": k} for k in kinds]}


# what a 1.36 API server with GenericWorkload and DRADeviceTaintRules on serves, as paths
SERVER_136 = {
    "/apis/scheduling.k8s.io": {
        "versions": [{"groupVersion": "scheduling.k8s.io/v1"}, {"groupVersion": "scheduling.k8s.io/v1alpha2"}]
    },
    "/apis/scheduling.k8s.io/v1": resources("scheduling.k8s.io/v1", "PriorityClass"),
    "/apis/scheduling.k8s.io/v1alpha2": resources("scheduling.k8s.io/v1alpha2", "Workload", "PodGroup"),
    "/apis/resource.k8s.io": {
        "versions": [{"groupVersion": "resource.k8s.io/v1"}, {"groupVersion": "resource.k8s.io/v1beta2"}]
    },
    "/apis/resource.k8s.io/v1": resources(
        "resource.k8s.io/v1", "ResourceSlice", "DeviceClass", "ResourceClaim", "ResourceClaimTemplate"
    ),
    "/apis/resource.k8s.io/v1beta2": resources(
        "resource.k8s.io/v1beta2",
        "ResourceSlice",
        "DeviceClass",
        "ResourceClaim",
        "ResourceClaimTemplate",
        "DeviceTaintRule",
    ),
}


@pytest.fixture
def server(monkeypatch):
    """A fake API server: discovery from ``paths``, lists of ``items``; every path asked for is recorded."""
    state = {"paths": dict(SERVER_136), "asked": []}

    def get_json(_api, path, **_query):
        state["asked"].append(path)
        if path not in state["paths"]:
            raise ApiException(status=404, reason="Not Found")
        return state["paths"][path]

    def list_path(_api, path, **_query):
        state["asked"].append(path)
        if path == "/api/v1/pods":
            return [GANG_POD]
        return [{"metadata": {"name": path.rsplit("/", 1)[-1]}}]

    monkeypatch.setattr(mod, "get_json", get_json)
    monkeypatch.setattr(mod, "list_path", list_path)
    return state


def test_136_reads_podgroups_in_v1alpha2_and_rules_in_v1beta2(server):
    _pods, _nodes, _events, podgroups, resource = mod.read_cluster(object(), ("nvidia.com/gpu",))
    assert podgroups == [{"metadata": {"name": "podgroups"}}]
    assert "/apis/scheduling.k8s.io/v1alpha2/podgroups" in server["asked"]
    assert "/apis/resource.k8s.io/v1beta2/devicetaintrules" in server["asked"]
    assert "/apis/resource.k8s.io/v1/resourceslices" in server["asked"]
    assert set(resource) == set(mod.DRA_KINDS)


def test_what_is_not_served_counts_as_not_served(server):
    for path in [p for p in server["paths"] if "v1alpha2" in p or "v1beta2" in p]:
        del server["paths"][path]
    _pods, _nodes, _events, podgroups, resource = mod.read_cluster(object(), ("nvidia.com/gpu",))
    assert podgroups is None
    assert resource["rules"] == []
    assert not any("podgroups" in p or "devicetaintrules" in p for p in server["asked"])
