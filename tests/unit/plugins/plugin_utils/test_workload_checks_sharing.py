"""The workload lint on time-sliced GPU resources, and its advice for a share of a GPU."""

from __future__ import annotations

from ansible_collections.gpusplit.k8s.plugins.plugin_utils.workload_checks import lint


def pod(limits):
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "nb", "namespace": "team"},
        "spec": {"containers": [{"name": "main", "image": "cuda", "resources": {"limits": limits}}]},
    }


def rules(findings):
    return [f["rule"] for f in findings]


def test_two_replicas_of_a_shared_gpu_are_warned_about():
    [finding] = lint([pod({"nvidia.com/gpu.shared": "2"})])
    assert finding["rule"] == "shared-gpu-more-than-one" and finding["severity"] == "warning"
    assert "UnexpectedAdmissionError" in finding["message"]
    assert finding["fix"].startswith("ask for nvidia.com/gpu.shared: 1")
    assert rules(lint([pod({"nvidia.com/mig-1g.10gb.shared": "3"})])) == ["shared-gpu-more-than-one"]


def test_one_replica_and_whole_gpus_are_fine():
    assert lint([pod({"nvidia.com/gpu.shared": "1"})]) == []
    assert lint([pod({"nvidia.com/gpu": "2"})]) == []


def test_a_fraction_of_a_gpu_points_at_the_inventory_variables():
    [finding] = lint([pod({"nvidia.com/gpu": "0.5"})])
    assert finding["rule"] == "extended-resource-integer"
    assert "gpusplit_sharing" in finding["fix"] and "gpusplit_mig_strategy" in finding["fix"]
