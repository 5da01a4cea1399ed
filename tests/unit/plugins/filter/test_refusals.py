"""Bad input given to a filter is refused with a message naming the host, argument, object or field
it is about, never with Python's own error text (issue 12, item 5)."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpusplit.k8s.plugins.filter import (
    fleet,
    gpu_table,
    split,
    workload,
    workload_lint,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import type_name
from ansible_collections.gpusplit.k8s.plugins.module_utils._split.planner import plan_fleet
from ansible_collections.gpusplit.k8s.tests.unit.gpufacts import h100


def filters(module):
    return module.FilterModule().filters()


def refused(func, *args, **kwargs):
    """The AnsibleFilterError's text of ``func(*args, **kwargs)``."""
    with pytest.raises(AnsibleFilterError) as err:
        func(*args, **kwargs)
    return str(err.value)


def gpu(i):
    return h100(i)


@pytest.mark.parametrize("spec", ["train", [{"name": "train"}], 4])
def test_gang_job_refuses_a_spec_that_is_not_a_mapping(spec):
    assert refused(filters(workload)["gang_job"], spec) == (
        "gpusplit gang job refused:\n"
        f"- the gang job: expected a mapping (name, replicas, gpus_per_pod, ...), got {type_name(spec)}"
    )


@pytest.mark.parametrize(
    ("manifest", "msg"),
    [
        ({"kind": ["Pod"], "metadata": {"name": "p"}}, "?/p: kind: expected a string, got list"),
        ({"kind": "Pod", "metadata": "p"}, "Pod/(unnamed): metadata: expected a mapping, got string"),
        (
            {"kind": "Pod", "metadata": {"name": "p", "namespace": "a"}, "spec": {"containers": "main"}},
            "Pod/a/p: spec.containers: expected a list of containers, got string",
        ),
        (
            {"kind": "Job", "metadata": {"name": "j"}, "spec": {"template": "pod"}},
            "Job/j: spec.template: expected a mapping, got string",
        ),
        (
            {
                "kind": "Deployment",
                "metadata": {"name": "d"},
                "spec": {
                    "template": {
                        "spec": {
                            "containers": [{"name": "c", "env": "X=1", "resources": {"limits": "1"}}, "x"],
                            "tolerations": [{"key": "k"}, "nvidia.com/gpu"],
                        }
                    }
                },
            },
            "Deployment/d: spec.template.spec.containers[0].env: expected a list, got string\n"
            "Deployment/d: spec.template.spec.containers[0].resources.limits: expected a mapping, got string\n"
            "Deployment/d: spec.template.spec.containers[1]: expected a mapping, got string\n"
            "Deployment/d: spec.template.spec.tolerations[1]: expected a mapping, got string",
        ),
    ],
)
def test_workload_lint_refuses_fields_of_the_wrong_type_naming_object_and_field(manifest, msg):
    assert refused(
        filters(workload_lint)["workload_lint"], [manifest]
    ) == f"gpusplit workload lint refused:\n- {msg}".replace("\nDeployment/", "\n- Deployment/")


def test_workload_lint_skips_other_kinds_but_refuses_what_is_no_object():
    lint = filters(workload_lint)["workload_lint"]
    assert lint([{"kind": "ConfigMap", "data": "x"}, {"kind": "Pod"}, None]) == []
    assert refused(lint, ["not a manifest"]) == (
        "gpusplit workload lint refused:\n- manifests[0]: expected a Kubernetes object (a mapping), got string"
    )


@pytest.mark.parametrize(
    ("kwargs", "msg"),
    [
        (
            {"mig_configs": ["all-1g.10gb"]},
            "mig_configs: expected a mapping of host to gpusplit_mig_config, got list",
        ),
        (
            {"clusterpolicies": {"name": "cluster-policy"}},
            "clusterpolicies: expected a list of ClusterPolicy objects (k8s_info resources), got mapping",
        ),
        ({"daemonsets": ["ds"]}, "daemonsets[0]: expected a mapping (a Kubernetes object), got string"),
    ],
)
def test_operator_config_refuses_arguments_of_the_wrong_type(kwargs, msg):
    from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import refusal_text
    from ansible_collections.gpusplit.k8s.plugins.plugin_utils import gpu_operator

    plan = plan_fleet({"gpu-a": {"facts": [gpu(0), gpu(1)], "mode": "gpu_operator", "split": {"count": 1}}})
    with pytest.raises(gpu_operator.OperatorError) as err:
        gpu_operator.operator_config(plan, **kwargs)
    assert (
        refusal_text("gpusplit GPU Operator mode", err.value)
        == f"gpusplit GPU Operator mode refused:\n- {msg}"
    )


HOSTVARS = {"gpu-a": {"ansible_facts": {"nvidia_gpus": [gpu(0)]}, "gpusplit_mig_config": "all-disabled"}}


@pytest.mark.parametrize(
    ("module", "name", "title"),
    [
        (fleet, "fleet_input", "gpusplit.k8s.fleet_input"),
    ],
)
def test_a_host_that_is_not_in_the_inventory_is_refused_naming_it(module, name, title):
    func = filters(module)[name]
    assert func(HOSTVARS, ["gpu-a"])  # a known host: as before
    assert refused(func, HOSTVARS, ["gpu-a", "gpu-z"]) == (
        f"{title} refused:\n- host 'gpu-z' is not in the inventory (hostvars has no such host)"
    )


@pytest.mark.parametrize(
    ("report", "errors"),
    [
        ([{"gpus": []}], ["expected a mapping of host to its GPU report, got list"]),
        (
            {"gpu-a": "down", "gpu-b": {"gpus": ["GPU-1", {"health": "ok", "mig_devices": {"1g.10gb": 2}}]}},
            [
                "gpu-a: expected the nvidia_gpu_facts result (a mapping), got string",
                "gpu-b.gpus[0]: expected a mapping, got string",
                "gpu-b.gpus[1].health: expected a mapping, got string",
                "gpu-b.gpus[1].mig_devices: expected a list, got mapping",
            ],
        ),
    ],
)
def test_gpu_table_refuses_a_report_of_the_wrong_shape(report, errors):
    assert refused(filters(gpu_table)["gpu_table"], report) == (
        "gpusplit.k8s.gpu_table refused:\n- " + "\n- ".join(errors)
    )


def test_gpu_table_renders_a_good_report_as_before():
    table = filters(gpu_table)["gpu_table"]({"gpu-b": None, "gpu-a": {"gpus": [gpu(0)]}})
    assert table.splitlines()[2].split()[:3] == ["gpu-a", "0", "0000:18:00.0"]
    assert table.splitlines()[3].split() == ["gpu-b", "-", "-", "-", "no", "GPU"]


def gone_mode_plan():
    plan = plan_fleet({"gpu-a": {"facts": [gpu(0), gpu(1)], "mode": "device_plugin", "split": {"count": 1}}})
    plan["nodes"]["gpu-a"]["mode"] = "gone"
    return plan


MODE_REFUSED = "gpusplit render refused:\n- gpu-a: node plan: mode 'gone' is not one of device_plugin, gpu_operator, dra, none"


def test_render_daemonsets_refuses_a_mode_the_table_does_not_have():
    assert refused(filters(split)["render_daemonsets"], gone_mode_plan()) == MODE_REFUSED
    assert refused(filters(split)["render_fleet"], gone_mode_plan()) == MODE_REFUSED


@pytest.mark.parametrize("taint_enabled", [False, True])
def test_node_taints_refuses_a_mode_the_table_does_not_have(taint_enabled):
    from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import refusal_text
    from ansible_collections.gpusplit.k8s.plugins.plugin_utils import split_render as render

    node_plan = gone_mode_plan()["nodes"]["gpu-a"]
    with pytest.raises(render.RenderError) as err:
        render.node_taints(node_plan, taint_enabled)
    assert refusal_text("gpusplit render", err.value) == MODE_REFUSED
    node_plan["mode"] = "device_plugin"
    assert render.node_taints(node_plan, taint_enabled) == (
        [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}] if taint_enabled else []
    )
