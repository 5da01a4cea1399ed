"""The lab's device-plugin stand-in with a config file: what the real plugin advertises when it shares its GPUs."""

from __future__ import annotations

import pytest
import yaml

from ansible_collections.gpusplit.k8s.plugins.module_utils._split.planner import plan_fleet
from ansible_collections.gpusplit.k8s.plugins.plugin_utils import split_render
from lab import deviceplugin as dp

DGX = dp.fixture_gpus("dgx-h100")


def rendered(**time_slicing):
    """The ConfigMap and DaemonSet gpusplit renders for the first 4 GPUs of the DGX fixture, 2 to Kubernetes."""
    facts = [dict(g, processes=[]) for g in DGX[:4]]
    plan = plan_fleet(
        {
            "n1": {
                "facts": facts,
                "mode": "device_plugin",
                "split": {"host_count": 2},
                "sharing": {"time_slicing": time_slicing},
            }
        }
    )
    cm, ds = split_render.render_fleet(plan)
    return plan["nodes"]["n1"], cm, ds


def pod_of(ds):
    template = ds["spec"]["template"]
    return {"metadata": {"namespace": ds["metadata"]["namespace"]}, "spec": template["spec"]}


def test_the_rendered_config_advertises_each_gpu_replicas_times():
    plan, cm, ds = rendered(replicas=4)
    pod = pod_of(ds)
    container = dp.plugin_container(pod)
    assert dp.config_source(pod, container) == ("kube-system", cm["metadata"]["name"], "config.yaml")
    sharing = dp.read_sharing(cm["data"]["config.yaml"])
    ids = dp.replicated(
        dp.advertised_ids(dp.visible_gpus(DGX, container), dp.mig_strategy(container)), sharing
    )
    assert ids == {"nvidia.com/gpu": [f"{u}::{n}" for u in plan["kubernetes_uuids"] for n in range(4)]}
    assert not any(u.split("::")[0] in plan["host_uuids"] for u in ids["nvidia.com/gpu"])


def test_rename_by_default_advertises_the_shared_name():
    _plan, cm, ds = rendered(replicas=3, rename=True, fail_requests_greater_than_one=True)
    container = dp.plugin_container(pod_of(ds))
    sharing = dp.read_sharing(cm["data"]["config.yaml"])
    assert sharing["fail_requests_greater_than_one"] is True
    counts = dp.advertised(dp.visible_gpus(DGX, container), dp.mig_strategy(container), sharing)
    assert counts == {"nvidia.com/gpu": 0, "nvidia.com/gpu.shared": 6}


def test_a_rename_of_ones_own_and_a_device_list_are_reset_as_the_plugin_does():
    text = yaml.safe_dump(
        {
            "version": "v1",
            "sharing": {
                "timeSlicing": {
                    "resources": [
                        {"name": "nvidia.com/gpu", "rename": "gpu-small", "devices": [0], "replicas": 2}
                    ]
                }
            },
        }
    )
    sharing = dp.read_sharing(text)
    assert sharing["resources"] == [{"name": "nvidia.com/gpu", "rename": "", "replicas": 2}]
    assert dp.advertised(DGX[:3], "none", sharing) == {"nvidia.com/gpu": 6}


def test_mps_wins_over_time_slicing_and_fails_requests_over_one_by_default():
    text = yaml.safe_dump(
        {
            "sharing": {
                "timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": 2}]},
                "mps": {"resources": [{"name": "nvidia.com/gpu", "replicas": 5}]},
            }
        }
    )
    sharing = dp.read_sharing(text)
    assert (sharing["strategy"], sharing["fail_requests_greater_than_one"]) == ("mps", True)
    assert dp.advertised(DGX[:1], "none", sharing) == {"nvidia.com/gpu": 5}


@pytest.mark.parametrize(
    ("doc", "words"),
    [
        ({"version": "v2"}, "unknown version"),
        ({"sharing": {"timeSlicing": {"resources": []}}}, "no resources specified"),
        (
            {"sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": 1}]}}},
            "replicas must be >= 2",
        ),
    ],
)
def test_a_config_the_plugin_refuses_is_refused(doc, words):
    with pytest.raises(dp.PluginConfigError, match=words):
        dp.read_sharing(yaml.safe_dump(doc))


def test_no_config_file_no_sharing():
    _plan, _cm, ds = rendered(replicas=2)
    pod = pod_of(ds)
    container = dict(dp.plugin_container(pod), env=[])
    assert dp.config_source(pod, container) is None
    assert dp.read_sharing("version: v1\n") is None
