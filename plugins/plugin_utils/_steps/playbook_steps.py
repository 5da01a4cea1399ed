# Copyright: gpusplit contributors
# Apache-2.0
"""The steps of the role admission_guard and of the playbooks isolate_gpu.yml and diagnose.yml.

Private to the collection.
"""

from __future__ import annotations

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError, type_name
from ansible_collections.gpusplit.k8s.plugins.plugin_utils._steps.registry import (
    list_input,
    mapping_input,
    step,
)
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.lazy import lazy

dra_isolation = lazy("plugin_utils._dra.isolation")
dra_render = lazy("plugin_utils._dra.render")
dra_rules = lazy("plugin_utils._dra.rule_plan")
fleet_outputs = lazy("plugin_utils.fleet_outputs")
guard_env = lazy("plugin_utils.workload_checks")
guard_policies = lazy("plugin_utils.admission_guard")
guard_report_lib = lazy("plugin_utils.guard_report")
planner = lazy("module_utils._split.planner")
render = lazy("plugin_utils.split_render")
split_table = lazy("plugin_utils.split_table")


# --------------------------------------------------------------------------------------------
# admission_guard


@step
def guard_objects(inputs, context):
    """``objects``: the guard against GPU visibility variables and device-list mounts, then the policies against
    DRA claims and privileged pods, each policy with its binding; ``policy_names``: the policies' names.

    inputs: guard (the first guard's settings), policies (the second's).
    """
    objects = guard_env.guard_objects(mapping_input(inputs, "guard")) + guard_policies.guard_objects(
        mapping_input(inputs, "policies")
    )
    names = [o["metadata"]["name"] for o in objects if o.get("kind") == "ValidatingAdmissionPolicy"]
    return {"objects": objects, "policy_names": names}


@step
def guard_report(inputs, context):
    """``report``: the namespaces whose Pod Security level allows privileged pods, and their workloads that can
    reach split nodes; ``lines``: the report for a person.

    inputs: namespaces, workloads, nodes, default_level, admission_config (the admission configuration's text),
    allowed_namespaces.
    """
    report = guard_report_lib.privileged_report(
        inputs.get("namespaces"),
        inputs.get("workloads"),
        inputs.get("nodes"),
        default_level=inputs.get("default_level"),
        admission_config=inputs.get("admission_config"),
        allowed_namespaces=inputs.get("allowed_namespaces") or (),
    )
    return {"report": report, "lines": guard_report_lib.report_table(report).split("\n")}


# --------------------------------------------------------------------------------------------
# playbooks/isolate_gpu.yml


@step
def isolation_targets(inputs, context):
    """``targets``: the GPUs one isolate_gpu run acts on, the one named by ``uuid`` or every unhealthy one.

    inputs: fleet_input, uuid, unhealthy.
    """
    return {
        "targets": dra_isolation.isolation_targets(
            mapping_input(inputs, "fleet_input"), inputs.get("uuid"), bool(inputs.get("unhealthy"))
        )
    }


@step
def isolation_rules(inputs, context):
    """``rules``: every DeviceTaintRule that isolates one located GPU, its published MIG devices included.

    inputs: located, effect, reason, slices.
    """
    return {
        "rules": dra_render.isolation_rules(
            mapping_input(inputs, "located"),
            inputs.get("effect", "None"),
            inputs.get("reason"),
            inputs.get("slices"),
        )
    }


@step
def isolation_rules_of_gpu(inputs, context):
    """``names``: the live gpusplit DeviceTaintRules of ``purpose`` that name GPU ``uuid``.

    inputs: rules, uuid, purpose.
    """
    return {
        "names": dra_rules.rules_of_gpu(
            list_input(inputs, "rules"), inputs.get("uuid"), inputs.get("purpose", "isolate")
        )
    }


@step
def isolation_replan(inputs, context):
    """One node planned again: without the target GPUs (``action`` isolate) or as the inventory says (undo).
    ``plan``, ``table`` (the plan for a person, line by line), ``objects`` (the node's labels and split device
    plugin) and ``daemonset`` (its DaemonSet's name).

    inputs: fleet_input, host, uuids, reason, action, operator_managed, plugin_settings.
    """
    fleet_input = mapping_input(inputs, "fleet_input")
    host = inputs.get("host")
    if inputs.get("action") == "isolate":
        sub = dra_isolation.isolation_fleet_input(
            fleet_input, host, list_input(inputs, "uuids"), inputs.get("reason")
        )
    else:
        if host not in fleet_input:
            raise GpusplitError(f"host {host!r} is not in the planner input")
        sub = {host: fleet_input[host]}
    plan = planner.plan_fleet(sub)
    objects = render.render_node_patches(
        plan, bool(inputs.get("operator_managed"))
    ) + render.render_daemonsets(plan, inputs.get("plugin_settings"))
    return {
        "plan": plan,
        "table": split_table.fleet_table(plan).split("\n"),
        "objects": objects,
        "daemonset": render.daemonset_name(plan["nodes"][host]["node"]),
    }


# --------------------------------------------------------------------------------------------
# playbooks/diagnose.yml


@step
def fleet_outputs_stale(inputs, context):
    """``reason``: why out/fleet-plan.json and out/fleet-report.json may not be read together ("" when they may),
    decided by their content (the report's plan_digest, the plan's GPUs against gpus.json), never by file times.

    inputs: dir (the output folder on the controller, where this step runs).
    """
    out_dir = inputs.get("dir")
    if not isinstance(out_dir, str) or not out_dir:
        raise GpusplitError(f"dir: expected the output folder (a path), got {type_name(out_dir)}")
    outputs, unreadable = fleet_outputs.read_outputs(out_dir)
    return {"reason": unreadable or fleet_outputs.stale_reason(outputs)}
