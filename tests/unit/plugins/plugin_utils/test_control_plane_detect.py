"""Which control plane a host has (plugins/plugin_utils/control_plane_detect.py)."""

from __future__ import annotations

import pytest

from ansible_collections.gpusplit.k8s.plugins.plugin_utils.control_plane_detect import (
    detect_control_plane,
)


@pytest.mark.parametrize(
    ("hints", "kind", "provider"),
    [
        (
            {"static_pod_manifests": ["kube-apiserver.yaml", "etcd.yaml"], "provider_ids": ["aws:///a/i-1"]},
            "kubeadm",
            None,
        ),
        ({"rancher": "rke2", "provider_ids": ["gce://p/z/n"]}, "rke2", None),
        ({"node_labels": [{"eks.amazonaws.com/nodegroup": "gpu"}]}, "managed", "eks"),
        ({"node_labels": {"cloud.google.com/gke-nodepool": "gpu-pool"}}, "managed", "gke"),
        (
            {"node_labels": [{"kubernetes.azure.com/cluster": "MC_rg"}], "provider_ids": ["azure:///sub/x"]},
            "managed",
            "aks",
        ),
        ({"server_git_version": "v1.37.2-eks-1a2b3c4"}, "managed", "eks"),
        ({"provider_ids": ["gce://project/zone/node"], "manifests_dir_exists": True}, "managed", "gke"),
        ({}, "unknown", None),
    ],
)
def test_detect_control_plane(hints, kind, provider):
    result = detect_control_plane(hints)
    assert (result["kind"], result["provider"]) == (kind, provider)
    assert result["managed"] is (kind == "managed")
    assert result["message"]


def test_detect_managed_message_names_the_provider():
    strong = detect_control_plane({"node_labels": [{"eks.amazonaws.com/nodegroup": "gpu"}]})
    assert strong["provider_name"] == "Amazon EKS"
    assert "managed by Amazon EKS" in strong["message"] and "cannot be changed" in strong["message"]
    weak = detect_control_plane({"provider_ids": ["aws:///us-east-1a/i-0abc"]})
    assert "probably managed by Amazon EKS" in weak["message"]
