"""The Helm releases gpusplit installs, on the last unsplit (gpusplit_unsplit_cluster: true, gpusplit_unsplit_releases;
plugins/plugin_utils/unsplit_cluster.py, releases_plan, and the step unsplit_cluster)."""

from __future__ import annotations

import copy

import pytest

from ansible_collections.gpusplit.k8s.plugins.plugin_utils import unsplit
from ansible_collections.gpusplit.k8s.plugins.plugin_utils import unsplit_cluster as wide
from ansible_collections.gpusplit.k8s.plugins.plugin_utils._dra import chart
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.role_steps import StepContext, run_step
from ansible_collections.gpusplit.k8s.tests.unit.plugins.plugin_utils.test_unsplit import live, one_node_plan

DRA = {"chart": "dra", "namespace": "dra-driver-nvidia-gpu", "name": "dra-driver-nvidia-gpu"}
OPERATOR = {"chart": "operator", "namespace": "gpu-operator", "name": "gpu-operator"}


def read(item, values=None, present=True):
    """kubernetes.core.helm_info's loop result for ``item``: the release with ``values`` (``helm get values``), or
    none (not installed)."""
    out = {"changed": False, "item": item, "ansible_loop_var": "item"}
    if present:
        out["status"] = {
            "name": item["name"],
            "namespace": item["namespace"],
            "status": "deployed",
            "release_values": values if values is not None else {},
            "values": values if values is not None else {},
        }
    return out


def gpusplits_values():
    """The values the role dra_driver installs the DRA driver with (its default settings)."""
    return chart.chart_values()


def test_the_dra_driver_installed_with_gpusplits_values_is_listed_with_its_uninstall_and_left():
    out = wide.releases_plan([read(DRA, gpusplits_values())])
    assert out["uninstall"] == []
    assert out["lines"] == [
        "whole cluster: helm release dra-driver-nvidia-gpu/dra-driver-nvidia-gpu (DRA driver, gpusplit's): left: "
        "helm uninstall -n dra-driver-nvidia-gpu dra-driver-nvidia-gpu, or run again with "
        "gpusplit_unsplit_releases=true"
    ]


@pytest.mark.parametrize("value", [True, "yes", "true", 1])
def test_with_gpusplit_unsplit_releases_gpusplits_dra_driver_is_uninstalled(value):
    uninstall = unsplit.check_settings("kubernetes", releases=value)["releases"]
    out = wide.releases_plan([read(DRA, gpusplits_values())], uninstall)
    assert out["uninstall"] == [{"namespace": DRA["namespace"], "name": DRA["name"]}]
    assert "uninstalled once the nodes are verified" in out["lines"][0]


@pytest.mark.parametrize(
    "values",
    [
        {},  # installed by hand, no values given
        {"kubeletPlugin": {"nodeSelector": {"nvidia.com/gpu.present": "true"}}},
        {"kubeletPlugin": {"nodeSelector": {"gpusplit.io/mode": "gpu_operator"}}},
        {"kubeletPlugin": "none"},
        None,
    ],
)
def test_a_dra_driver_whose_values_do_not_select_gpusplits_mode_is_listed_and_never_uninstalled(values):
    info = read(DRA, values)
    if values is None:
        del info["status"]["release_values"], info["status"]["values"]
    out = wide.releases_plan([info], uninstall=True)
    assert out["uninstall"] == []
    assert len(out["lines"]) == 1 and "not proven gpusplit's" in out["lines"][0]
    assert out["lines"][0].endswith("left")


def test_the_values_of_an_older_kubernetes_core_are_read_too():
    info = read(DRA, gpusplits_values())
    del info["status"]["release_values"]
    assert wide.releases_plan([info], uninstall=True)["uninstall"] == [
        {"namespace": DRA["namespace"], "name": DRA["name"]}
    ]


def test_the_gpu_operator_release_is_not_proven_gpusplits_and_is_left():
    # the values gpusplit's operator install carries are the user's Helm values with its env entries: no mark
    values = {
        "toolkit": {
            "env": [{"name": "ACCEPT_NVIDIA_VISIBLE_DEVICES_ENVVAR_WHEN_UNPRIVILEGED", "value": "false"}]
        }
    }
    out = wide.releases_plan([read(OPERATOR, values)], uninstall=True)
    assert out["uninstall"] == []
    assert "(GPU Operator): not proven gpusplit's" in out["lines"][0]
    assert "helm uninstall -n gpu-operator gpu-operator" in out["lines"][0]


def test_releases_not_installed_say_nothing_and_an_unreadable_one_is_left():
    assert wide.releases_plan([read(DRA, present=False), read(OPERATOR, present=False)], True) == {
        "uninstall": [],
        "lines": [],
    }
    failed = {"item": DRA, "failed": False, "msg": "Failed to find required executable helm"}
    out = wide.releases_plan([failed, {"item": OPERATOR, "skipped": True}], True)
    assert out["uninstall"] == []
    assert out["lines"] == [
        "whole cluster: helm release dra-driver-nvidia-gpu/dra-driver-nvidia-gpu: could not be read "
        "(Failed to find required executable helm), left"
    ]


@pytest.mark.parametrize("value", ["perhaps", 2, [True], None])
def test_a_releases_setting_that_is_no_boolean_is_refused_before_any_change(value):
    with pytest.raises(unsplit.UnsplitError, match="gpusplit_unsplit_releases: .* is not a boolean"):
        unsplit.check_settings("kubernetes", releases=value)
    refused = run_step("unsplit_settings", {"to": "kubernetes", "releases": value}, StepContext())
    assert refused["failed"] and "gpusplit_unsplit_releases" in refused["msg"]


def cluster_inputs(**more):
    plan = one_node_plan("a-dp")
    name = plan["nodes"]["a-dp"]["node"]
    return {
        "plan": plan,
        "to": "kubernetes",
        "plugin": "none",
        "nodes": [live(name)],
        "daemonsets": [],
        **more,
    }


def test_the_cluster_step_lists_the_releases_only_for_the_whole_cluster_and_a_second_run_does_nothing():
    releases = [read(DRA, gpusplits_values()), read(OPERATOR, {})]
    alone = run_step(
        "unsplit_cluster", cluster_inputs(releases=releases, uninstall_releases=True), StepContext()
    )
    assert alone["cluster"]["wide"] is None
    assert not any("helm release" in line for line in alone["cluster"]["lines"])
    out = run_step(
        "unsplit_cluster",
        cluster_inputs(releases=copy.deepcopy(releases), uninstall_releases="true", cluster_wide=True),
        StepContext(),
    )["cluster"]
    assert out["refusals"] == []
    assert out["wide"]["releases"]["uninstall"] == [{"namespace": DRA["namespace"], "name": DRA["name"]}]
    said = [line for line in out["lines"] if "helm release" in line]
    assert len(said) == 2 and "gpu-operator/gpu-operator (GPU Operator): not proven" in said[1]
    # the second run: the DRA driver is gone, the operator's release is listed again and left
    again = run_step(
        "unsplit_cluster",
        cluster_inputs(
            releases=[read(DRA, present=False), read(OPERATOR, {})],
            uninstall_releases=True,
            cluster_wide=True,
        ),
        StepContext(),
    )["cluster"]
    assert again["wide"]["releases"]["uninstall"] == []


def test_the_cluster_step_refuses_a_releases_setting_that_is_no_boolean():
    refused = run_step(
        "unsplit_cluster", cluster_inputs(cluster_wide=True, uninstall_releases="sometimes"), StepContext()
    )
    assert refused["failed"] and "gpusplit_unsplit_releases" in refused["msg"]
