# Copyright: gpusplit contributors
# Apache-2.0
"""The steps of the roles that read or change hosts: gpu_discovery, gpu_host, dra_driver,
control_plane_gates. Private to the collection.
"""

from __future__ import annotations

import base64

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError, type_name
from ansible_collections.gpusplit.k8s.plugins.plugin_utils._steps.registry import (
    list_input,
    mapping_input,
    step,
)
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.lazy import lazy

cp_detect_lib = lazy("plugin_utils.control_plane_detect")
cp_gate_preflight = lazy("module_utils._control_plane.gate_preflight")
cp_health = lazy("module_utils._control_plane.health")
cp_static_pod = lazy("module_utils._control_plane.static_pod")
dra_chart = lazy("plugin_utils._dra.chart")
dra_names = lazy("module_utils._dra.names")
dra_preflight = lazy("plugin_utils._dra.preflight")
host_play_lib = lazy("plugin_utils.host_play")
inventory_vars = lazy("plugin_utils.inventory_vars")
k8s_versions = lazy("module_utils._k8s.versions")
mig_apply_lib = lazy("plugin_utils.mig_apply")


# --------------------------------------------------------------------------------------------
# gpu_host


@step
def host_play_fleet(inputs, context):
    """The host side of every planned host at once, each with its own variables: ``runs`` (host: run),
    ``pending`` (the hosts whose host side changes, or is not known) and ``unchanged``.

    inputs: plan, defaults (the role's, for what a host leaves out), toolkit_settings.
    """
    return host_play_lib.host_play_fleet(
        inputs.get("plan"), context.hostvars, inputs.get("defaults"), inputs.get("toolkit_settings")
    )


@step
def host_play(inputs, context):
    """What the role gpu_host does on the host of one node plan, and its digest: ``fleet_run`` as it is where
    the fleet's step worked it out already.

    inputs: fleet_run, plan, services, root, toolkit_hardening, plugin_settings, toolkit_config_path,
    toolkit_backup, systemd_reload, toolkit_settings, discovery.
    """
    if inputs.get("fleet_run"):
        return dict(inputs["fleet_run"])
    return host_play_lib.host_play(
        inputs.get("plan"),
        inputs.get("services"),
        inputs.get("root", "/"),
        inputs.get("toolkit_hardening", True),
        inputs.get("plugin_settings"),
        inputs.get("toolkit_config_path", "/etc/nvidia-container-runtime/config.toml"),
        inputs.get("toolkit_backup", True),
        inputs.get("systemd_reload", True),
        inputs.get("toolkit_settings"),
        inputs.get("discovery"),
    )


@step
def mig_apply(inputs, context):
    """The MIG geometry of a node in mode device_plugin on its host (plugin_utils/mig_apply.py), by ``part``:

    - ``apply`` (default): what gpu_host's entry point mig runs on the host of ``plan`` given ``gpus`` (read there
      just before): the GPUs whose MIG geometry changes, the config and drop-in to keep there, the command that reads
      nvidia-mig-manager.service's own files and the nvidia-mig-parted command (host_step);
    - ``boot``: refuses where those files (``stdout`` of that command) select a MIG config of the host's own at boot,
      which gpusplit's drop-in would replace (boot_check; ``selected``: gpusplit's config name);
    - ``undo``: what the unsplit takes back below ``root``: ``list_argv`` (lists the drop-in folder), and with
      ``names`` (what it listed) ``remove``, the paths to remove in order, each with why (undo_removals).

    inputs: part, plan, gpus, root, plugin_settings, selected, stdout, names.
    """
    part = inputs.get("part", "apply")
    root = inputs.get("root", "/")
    if part == "boot":
        return mig_apply_lib.boot_check(
            inputs.get("plan"), inputs.get("selected"), inputs.get("stdout"), root
        )
    if part == "undo":
        out = {**mig_apply_lib.undo_paths(root), "list_argv": mig_apply_lib.undo_list_argv(root)}
        if inputs.get("names") is not None:
            out["remove"] = mig_apply_lib.undo_removals(root, inputs["names"])
        return out
    if part != "apply":
        raise mig_apply_lib.MigApplyError(f"part: expected apply, boot or undo, got {part!r}")
    return mig_apply_lib.host_step(
        inputs.get("plan"), inputs.get("gpus"), root, inputs.get("plugin_settings")
    )


# --------------------------------------------------------------------------------------------
# gpu_discovery


@step
def discovery_reports(inputs, context):
    """``reports``: the GPU report of each of ``hosts`` from its discovery result (plugin_utils/inventory_vars.py);
    with ``known`` (the role's own reports), those taken as they are and every other host unfinished.

    inputs: hosts, known.
    """
    known = inputs.get("known")
    if known is not None and not isinstance(known, dict):
        raise GpusplitError(f"known: expected a mapping of host to its GPU report, got {type_name(known)}")
    return {"reports": inventory_vars.discovery_reports(context.hostvars, list_input(inputs, "hosts"), known)}


# --------------------------------------------------------------------------------------------
# dra_driver


# what the host side (tasks/host.yml) keeps for the preflight, in its registered dra_driver_host_report
CONTAINERD_REPORT = ("config_path", "config_text", "version", "imports")


@step
def dra_driver_plan(inputs, context):
    """``chart_values``: the dra-driver-nvidia-gpu chart values for a gpusplit fleet (what the chart's own validation
    would refuse is refused here); ``nodes``: the node plans in mode dra.

    inputs: settings, plan.
    """
    return {
        "chart_values": dra_chart.chart_values(inputs.get("settings")),
        "nodes": dra_names.dra_node_plans(mapping_input(inputs, "plan")),
    }


@step
def dra_containerd_config(inputs, context):
    """``text``: containerd's config.toml as read (None where the host has none); ``globs``: the absolute import
    globs of it.

    inputs: content (the slurped file's base64 content, None where there is no file), config_path.
    """
    config_path = inputs.get("config_path", "/etc/containerd/config.toml")
    if not isinstance(config_path, str):
        raise dra_names.DraError(
            f"config_path: expected a string (containerd's config.toml and its path), got {type_name(config_path)}"
        )
    content = inputs.get("content")
    text = None if content is None else base64.b64decode(content).decode("utf-8", errors="replace")
    return {"text": text, "globs": dra_preflight.containerd_imports(text or "", config_path)}


@step
def dra_host_report(inputs, context):
    """What the preflight needs of one host's containerd: ``config_path``, ``config_text``, ``version`` and
    ``imports`` ([{path, text}] of each file read by a looped ansible.builtin.slurp; skipped items left out).

    inputs: config_path, config_text, version, slurped (the slurp loop's results).
    """
    imports = []
    for result in list_input(inputs, "slurped"):
        if result.get("skipped") or "content" not in result:
            continue
        text = base64.b64decode(result["content"]).decode("utf-8", errors="replace")
        imports.append({"path": result.get("source") or result.get("item"), "text": text})
    return {
        "config_path": inputs.get("config_path"),
        "config_text": inputs.get("config_text"),
        "version": inputs.get("version"),
        "imports": imports,
    }


def _dra_host_inputs(plan, hostvars):
    """{host: {node, driver_version, containerd}} of the hosts in mode dra, for the preflight."""
    out = {}
    for node_plan in dra_names.dra_node_plans(plan):
        host = node_plan["host"]
        hv = hostvars[host]
        facts = hv.get("ansible_facts", {}) or {}
        report = hv.get("dra_driver_host_report")
        out[host] = {
            "node": node_plan["node"],
            "driver_version": facts.get("nvidia_driver_version", hv.get("nvidia_driver_version")),
            # None: the role's host side (tasks_from host.yml) did not run there
            "containerd": None if report is None else {k: report.get(k) for k in CONTAINERD_REPORT},
        }
    return out


@step
def dra_driver_preflight(inputs, context):
    """``report``: every check the DRA driver and DRA-mode split need (``ok``, ``errors``, the checks), over what
    the role gathered; ``lines``: the report for a person, its warnings after the table.

    inputs: cluster_info (kubernetes.core.k8s_cluster_info's result), plan, pods, skip, need_taint_rules,
    component_gates (optional: control_plane_health's feature_gates, {component: {gate: 0 or 1}}).
    """
    info = inputs.get("cluster_info") or {}
    if not isinstance(info, dict):
        raise dra_names.DraError(
            f"cluster_info: expected the result of kubernetes.core.k8s_cluster_info, got {type_name(info)}"
        )
    server = ((info.get("version") or {}).get("server") or {}).get("kubernetes") or {}
    cluster = {"git_version": server.get("gitVersion"), "apis": info.get("apis") or {}}
    gates = inputs.get("component_gates") or {}
    if isinstance(gates, dict):
        cluster["gates"] = {
            c: {g: bool(v) for g, v in values.items() if v is not None}
            for c, values in gates.items()
            if isinstance(values, dict)
        }
    hosts = _dra_host_inputs(mapping_input(inputs, "plan"), context.hostvars)
    report = dra_preflight.preflight(
        cluster, hosts, inputs.get("pods"), inputs.get("skip") or (), inputs.get("need_taint_rules", True)
    )
    return {
        "report": report,
        "lines": dra_preflight.preflight_table(report).split("\n") + list(report["warnings"]),
    }


# --------------------------------------------------------------------------------------------
# control_plane_gates


@step
def cp_detect(inputs, context):
    """Which control plane a host runs (kubeadm, k3s, rke2, managed or unknown), with the reason.

    inputs: hints (what the role found on the host and, where nothing is there to edit, in the cluster).
    """
    return cp_detect_lib.detect_control_plane(dict(mapping_input(inputs, "hints")))


@step
def cp_version(inputs, context):
    """``version``: the Kubernetes version of the control plane: ``given`` where set, else the kube-apiserver
    manifest's image tag (kubeadm) or the k3s/rke2 binary's ``--version`` output (None when neither says one).

    inputs: given, kind, manifest (the manifest's text), version_output.
    """
    given = inputs.get("given")
    if given is not None and str(given):
        return {"version": str(given)}
    if inputs.get("kind") == "kubeadm":
        return {"version": cp_static_pod.version_from_manifest(str(inputs.get("manifest") or ""))}
    return {"version": k8s_versions.version_from_version_output(str(inputs.get("version_output") or ""))}


@step
def cp_runtime_config(inputs, context):
    """``runtime_config``: the kube-apiserver's ``--runtime-config`` this run plans, the catalog's requested entries
    with the role's own over them; ``api_versions``: the group/versions that map switches on.

    inputs: requested (feature_gate_preflight's runtime_config for the requested gates), extra
    (gpusplit_cp_runtime_config).
    """
    runtime_config = {**mapping_input(inputs, "requested"), **mapping_input(inputs, "extra")}
    return {
        "runtime_config": runtime_config,
        "api_versions": sorted(
            key
            for key, value in runtime_config.items()
            if key.count("/") == 1
            and not key.startswith("api/")
            and cp_gate_preflight.runtime_config_on(value)
        ),
    }


@step
def cp_upgrade_unreadable_kinds(inputs, context):
    """``kinds``: those the cluster serves in a group/version the upgrade target does not register; ``queries``:
    a cluster_read query per kind, named ``"<api_version> <kind>"``.

    inputs: apis (kubernetes.core.k8s_cluster_info's), target (gpusplit_upgrade_target_version).
    """
    kinds = cp_gate_preflight.unreadable_kinds(mapping_input(inputs, "apis"), inputs.get("target"))
    queries = {
        f"{k['api_version']} {k['kind']}": {**k, "fields": ["metadata.namespace", "metadata.name"]}
        for k in kinds
    }
    return {"kinds": kinds, "queries": queries}


@step
def cp_upgrade_unreadable_objects(inputs, context):
    """``objects``: the objects of those kinds that exist, when ``delete`` asks to delete them (refused, naming
    each, otherwise); ``labels``: how each is named; ``definitions``: them as kubernetes.core.k8s deletes them in
    one module execution.

    inputs: kinds (cp_upgrade_unreadable_kinds's), found (cluster_read's resources), target, delete.
    """
    delete = inputs.get("delete")
    if not isinstance(delete, bool):
        raise cp_gate_preflight.CatalogError(
            f"{cp_gate_preflight.DELETE_UNREADABLE_VARIABLE}: expected true or false, got {delete!r}"
        )
    objects = cp_gate_preflight.unreadable_objects(
        list_input(inputs, "kinds"), mapping_input(inputs, "found"), inputs.get("target"), delete=delete
    )
    definitions = [
        {
            "apiVersion": o["api_version"],
            "kind": o["kind"],
            "metadata": {"name": o["name"], **({"namespace": o["namespace"]} if o.get("namespace") else {})},
        }
        for o in objects
    ]
    return {
        "objects": objects,
        "labels": [cp_gate_preflight.object_label(o) for o in objects],
        "definitions": definitions,
    }


def _max_lines(value):
    """``max_lines`` as a positive int; anything else is refused, naming the input."""
    try:
        number = None if isinstance(value, (bool, float)) else int(value)
    except (TypeError, ValueError):
        number = None
    if number is None or number < 1:
        raise cp_health.HealthError(f"max_lines: expected a whole number of lines (1 or more), got {value!r}")
    return number


@step
def cp_component_error(inputs, context):
    """``lines``: the lines of a component's log tail that say why it stopped (newest last).

    inputs: texts (a command's stdout and stderr, read one after the other), max_lines (6).
    """
    text = "\n".join(str(t or "") for t in list_input(inputs, "texts"))
    return {"lines": cp_health.component_error(text, _max_lines(inputs.get("max_lines", 6)))}
