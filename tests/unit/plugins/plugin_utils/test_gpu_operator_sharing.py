"""gpu_operator mode with a time-sliced Kubernetes share: the split plugin carries the sharing, the one
ClusterPolicy is the same with and without it."""

from __future__ import annotations

import yaml

from ansible_collections.gpusplit.k8s.plugins.plugin_utils import gpu_operator as G
from ansible_collections.gpusplit.k8s.plugins.plugin_utils import split_render as render
from ansible_collections.gpusplit.k8s.tests.unit.plugins.plugin_utils.test_gpu_operator import (
    VM,
    facts,
    fleet,
    live_policy,
)

SHARED = {
    "facts": facts("dgx-h100"),
    "mode": "gpu_operator",
    "split": {"host_count": 2},
    "mig_strategy": "single",
    "sharing": {"time_slicing": {"replicas": 4, "rename": True}},
}


def test_sharing_goes_into_the_split_plugins_config_and_not_into_the_clusterpolicy():
    plain, shared = fleet(), fleet(**{"op-a": SHARED})
    assert G.operator_config(shared, {}, [live_policy()], VM) == G.operator_config(
        plain, {}, [live_policy()], VM
    )
    objects = render.render_fleet(shared)
    [cm] = [o for o in objects if o["kind"] == "ConfigMap"]
    assert cm["metadata"]["name"] == "gpusplit-dp-op-a"
    config = yaml.safe_load(cm["data"]["config.yaml"])
    assert config["sharing"]["timeSlicing"]["resources"] == [{"name": "nvidia.com/gpu", "replicas": 4}]
    node = shared["nodes"]["op-a"]
    assert node["resources"] == {"nvidia.com/gpu": 0, "nvidia.com/gpu.shared": 24}  # 6 GPUs x 4
    labels = render.node_labels(node)
    assert labels["nvidia.com/gpu.deploy.device-plugin"] == "false"  # the operator's own plugin stays off
    assert labels["gpusplit.io/time-slicing-replicas"] == "4"
