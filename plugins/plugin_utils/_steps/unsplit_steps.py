# Copyright: gpusplit contributors
# Apache-2.0
"""The steps that take gpusplit back: the role gpu_unsplit (playbooks/unsplit.yml, docs/undo.md), and a gate set to
``absent`` in the role control_plane_gates. Private to the collection."""

from __future__ import annotations

from ansible_collections.gpusplit.k8s.plugins.plugin_utils._steps.registry import (
    connection_args,
    list_input,
    mapping_input,
    step,
)
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.lazy import lazy

cp_gates = lazy("module_utils._control_plane.gates")
host_play_lib = lazy("plugin_utils.host_play")
inventory_vars = lazy("plugin_utils.inventory_vars")
unsplit = lazy("plugin_utils.unsplit")
unsplit_wide = lazy("plugin_utils.unsplit_cluster")
verify = lazy("module_utils._split.verify")


@step
def unsplit_settings(inputs, context):
    """``settings``: the unsplit's settings, checked (a missing or unknown target refused before any change).

    inputs: to, host_files, plugin, cluster, force, releases, wait (gpusplit_unsplit_wait_seconds).
    """
    return {
        "settings": unsplit.check_settings(
            inputs.get("to"),
            inputs.get("host_files", "restore"),
            inputs.get("plugin", "stock"),
            inputs.get("cluster", False),
            inputs.get("force", False),
            inputs.get("releases", False),
            inputs.get("wait", 120),
        )
    }


@step
def unsplit_plan(inputs, context):
    """``plan``: the fleet plan with every healthy GPU in the target's share (what gpu_resplit checks); ``hosts``:
    per planned host, where gpusplit's host files are (from the host play of the plan as it was); ``lines``: what
    the run undoes on each host.

    inputs: plan, to, host_files, defaults (gpu_host's, by inventory variable), hosts (the hosts of the play: those
    not planned, unreachable or whose discovery failed, are ``unreached`` and left as they are, cluster side too, unless
    force: then ``forced`` lists them with their node, for unsplit_cluster).
    """
    plan = mapping_input(inputs, "plan")
    to = inputs.get("to")
    fleet = host_play_lib.host_play_fleet(plan, context.hostvars, mapping_input(inputs, "defaults"))
    mode = inputs.get("host_files", "restore")
    hosts, lines = {}, []
    for host, run in sorted(fleet["runs"].items()):
        share = run["share"]
        hosts[host] = {
            "state_path": share["state_path"],
            "toolkit_path": run["toolkit_config"],
            "env_path": share["env_path"],
            "dropin_dir": share["systemd_dir"],
            "dropin_name": share["dropin_name"],
            "marker": share["marker"],
            "daemon_reload": run["systemd_reload"],
        }
        toolkit = {
            "restore": "put back from gpusplit's backup while it is as gpusplit wrote it, else gpusplit's keys out",
            "remove": "gpusplit's keys out",
            "keep": "hardening kept",
        }[mode]
        lines.append(
            f"{host}: {run['toolkit_config']}: {toolkit}; {share['env_path']} and gpusplit's drop-ins removed"
            + ("" if mode == "keep" else f"; {share['state_path']} removed")
        )
    unreached = sorted(h for h in list_input(inputs, "hosts") if h not in (plan.get("nodes") or {}))
    force = unsplit.check_settings(to, force=inputs.get("force", False))["force"]
    lines.extend(
        f"{host}: not reached (unreachable, or its discovery failed): "
        + (
            "its cluster side taken back anyway (gpusplit_unsplit_force), its host files left as they are"
            if force
            else "left as it is, on the host and in the cluster (gpusplit_unsplit_force=true takes its cluster side "
            "back anyway)"
        )
        for host in unreached
    )
    forced = (
        [
            {"host": host, "node": node}
            for host, node in zip(
                unreached, inventory_vars.inventory_nodes(context.hostvars, unreached), strict=True
            )
        ]
        if force
        else []
    )
    return {
        "plan": unsplit.unsplit_plan(plan, to),
        "hosts": hosts,
        "lines": lines,
        "unreached": unreached,
        "forced": forced,
    }


@step
def unsplit_cluster(inputs, context):
    """``cluster``: what the cluster side does per node and what it refuses (plugin_utils/unsplit.py, cluster_plan);
    with ``cluster_wide`` true, ``cluster.wide`` is what goes besides (unsplit_cluster.py), its refusals among
    ``cluster.refusals`` and its lines among ``cluster.lines``.

    inputs: plan (as it was), to, plugin, nodes, daemonsets, field_manager, helm_wait (seconds), forced (unsplit_plan's),
    cluster_wide, policies, bindings, namespaces, clusterpolicies, releases (unsplit_cluster.releases_plan's),
    uninstall_releases; api_versions (cluster_api_versions' result with the use
    device_taint_rule, where the plan has nodes in mode dra).
    """
    plan = mapping_input(inputs, "plan")
    nodes = list_input(inputs, "nodes")
    daemonsets = list_input(inputs, "daemonsets")
    manager = inputs.get("field_manager") or "gpusplit"
    found = mapping_input(inputs, "api_versions")
    dra = {}
    if found:
        dra = {
            "dra_api_version": (found.get("api_versions") or {}).get("device_taint_rule"),
            "dra_refusal": (found.get("refusals") or {}).get("device_taint_rule"),
        }
    out = unsplit.cluster_plan(
        plan,
        inputs.get("to"),
        nodes,
        daemonsets,
        inputs.get("plugin", "stock"),
        manager,
        helm_wait=unsplit.check_helm_wait(inputs.get("helm_wait", 0)),
        forced=list_input(inputs, "forced"),
        **dra,
    )
    wide = None
    settings = unsplit.check_settings(
        inputs.get("to"),
        cluster=inputs.get("cluster_wide", False),
        releases=inputs.get("uninstall_releases", False),
    )
    if settings["cluster"]:
        wide = unsplit_wide.cluster_wide_plan(
            plan,
            nodes,
            daemonsets,
            list_input(inputs, "policies"),
            list_input(inputs, "bindings"),
            list_input(inputs, "namespaces"),
            manager,
            covered=out["forced"],
        )
        wide["clusterpolicy"] = unsplit_wide.clusterpolicy_plan(
            list_input(inputs, "clusterpolicies"), manager
        )
        wide["releases"] = unsplit_wide.releases_plan(
            list_input(inputs, "releases"), settings["releases"], list_input(inputs, "clusterpolicies")
        )
        out["refusals"].extend(wide["refusals"])
        out["lines"].extend(wide["lines"] + wide["clusterpolicy"]["lines"] + wide["releases"]["lines"])
    out["wide"] = wide
    return {"cluster": out}


@step
def unsplit_namespaces(inputs, context):
    """``delete``: gpusplit's namespaces with nothing but gpusplit's own objects left in them; ``lines``: the others,
    each with what is left (kept).

    inputs: namespaces (cluster_wide_plan's), found (its namespace_queries, read).
    """
    delete, kept = unsplit_wide.namespaces_to_delete(
        list_input(inputs, "namespaces"), mapping_input(inputs, "found")
    )
    return {"delete": delete, "lines": kept}


def _stock_running(pods):
    out = set()
    for pod in pods:
        spec = pod.get("spec") or {}
        labels = (pod.get("metadata") or {}).get("labels") or {}
        if labels.get("app.kubernetes.io/managed-by") == "gpusplit":
            continue
        if (pod.get("status") or {}).get("phase") != "Running":
            continue
        if any(verify.is_device_plugin_container(c) for c in spec.get("containers") or []):
            out.add(spec.get("nodeName"))
    return out


def _split_left(pods):
    return {
        (p.get("spec") or {}).get("nodeName")
        for p in pods
        if ((p.get("metadata") or {}).get("labels") or {}).get("app.kubernetes.io/managed-by") == "gpusplit"
        and ((p.get("metadata") or {}).get("labels") or {}).get("app.kubernetes.io/name")
        == "gpusplit-device-plugin"
    }


WAITED_FOR = {
    "helm": "the Helm release still keeps its device plugin off",
    "stock": "no device plugin gpusplit does not own runs on",
    "split_gone": "gpusplit's split plugin pod is still on",
}


@step
def unsplit_wait(inputs, context):
    """Waits, polling every ``delay`` seconds, until ``until`` holds for every node or ``wait_seconds`` of wall clock
    have passed (unsplit.poll_until: a deadline, however long each read takes): ``helm`` (the Helm release of each
    entry's DaemonSet lets it on the node: cluster_plan's helm_waits), ``stock`` (a device-plugin pod gpusplit does
    not own runs there), ``split_gone`` (no pod of gpusplit's split plugin is left there) or ``verify``
    (allocatable is what the unsplit leaves). Returns ``ok``, ``left`` (the nodes it still does not hold for),
    ``seconds`` (how long it took), ``lowest`` ({node: the lowest allocatable seen}), ``lines``, and for ``verify``
    ``summary`` and ``failure`` (unsplit.verify_report: settled only when it settled); ``msg`` when not ok.

    inputs: nodes (cluster_plan's entries), until, wait_seconds, delay, gap_before (verify: the seconds the split
    plugins took to go), kubeconfig, context.
    """
    entries = list_input(inputs, "nodes")
    until = inputs.get("until")
    if until not in (*WAITED_FOR, "verify"):
        raise unsplit.UnsplitError(
            f"unsplit_wait: until {until!r} is not one of helm, stock, split_gone, verify"
        )
    names = [e["node"] for e in entries]
    wait = (
        unsplit.check_helm_wait(inputs.get("wait_seconds") or 0)
        if until == "helm"
        else unsplit.check_seconds(
            inputs.get("wait_seconds") or 0, "gpusplit_unsplit_wait_seconds", unsplit.WAIT_ZERO
        )
    )
    delay = float(inputs.get("delay") or 1)
    lowest, last = {}, {"nodes": []}

    def read():
        if until == "helm":
            result = context.run_module(
                "kubernetes.core.k8s_info",
                {"api_version": "apps/v1", "kind": "DaemonSet", **connection_args(inputs)},
            )
            return sorted(
                {w["node"] for w in unsplit.helm_still_off(entries, (result or {}).get("resources"))}
            )
        if until == "verify":
            result = context.run_module(
                "kubernetes.core.k8s_info", {"api_version": "v1", "kind": "Node", **connection_args(inputs)}
            )
            nodes = [n for n in (result or {}).get("resources") or [] if n["metadata"]["name"] in names]
            live = {n["metadata"]["name"]: n for n in nodes}
            last["nodes"] = nodes
            for entry in entries:
                have = unsplit.allocatable_of(live.get(entry["node"]), entry["resource"])
                lowest[entry["node"]] = min(lowest.get(entry["node"], have), have)
            return [
                e["node"]
                for e in entries
                if unsplit.allocatable_of(live.get(e["node"]), e["resource"]) != e["expected"]
            ]
        result = context.run_module(
            "kubernetes.core.k8s_info", {"api_version": "v1", "kind": "Pod", **connection_args(inputs)}
        )
        pods = [
            p for p in (result or {}).get("resources") or [] if (p.get("spec") or {}).get("nodeName") in names
        ]
        if until == "stock":
            running = _stock_running(pods)
            return [n for n in names if n not in running]
        gone = _split_left(pods)
        return [n for n in names if n in gone]

    left, seconds = unsplit.poll_until(read, wait, delay, context.sleep, context.clock)
    out = {"ok": not left, "left": left, "seconds": seconds, "lowest": lowest, "lines": []}
    if until == "verify":
        report = unsplit.verify_report(
            entries, last["nodes"], seconds, lowest, wait, float(inputs.get("gap_before") or 0)
        )
        out.update(lines=report["lines"], summary=report["summary"], failure=report["failure"])
        if left:
            out["msg"] = report["failure"]
    elif left:
        out["lines"] = [f"after {seconds}s (limit {wait}s) {WAITED_FOR[until]} {', '.join(left)}"]
        out["msg"] = out["lines"][0]
    return out


def _gated_kinds(api):
    """``("group/version", [Kind, ...])`` of a catalog entry's ``api`` text (``"scheduling.k8s.io/v1beta1 Workload,
    PodGroup"``); None for an API on by default (nothing gpusplit switched on)."""
    if not isinstance(api, str) or "on by default" in api or " " not in api:
        return None
    version, kinds = api.split(" ", 1)
    return version, [k.strip() for k in kinds.split(",") if k.strip()]


@step
def cp_gates_absent(inputs, context):
    """gpusplit_feature_gates split into ``set`` (name: value, what is merged) and ``absent`` (the names set to
    ``absent``: taken out of the flags), with ``remove_runtime_config`` (the --runtime-config entries gpusplit adds
    for the absent gates at ``version``) and ``queries`` (one per kind of object the absent gates' APIs serve: while
    one exists, taking the gate out is refused).

    inputs: gates, version.
    """
    gates = mapping_input(inputs, "gates")
    absent = sorted(
        name for name, value in gates.items() if isinstance(value, str) and value.lower() == "absent"
    )
    remove, queries = {}, []
    for name in absent:
        spec = cp_gates.spec_at(name, inputs.get("version")) if inputs.get("version") else None
        if spec is None:
            continue
        remove.update(spec["runtime_config"])
        gated = _gated_kinds(spec["api"])
        if gated:
            queries.extend({"gate": name, "api_version": gated[0], "kind": kind} for kind in gated[1])
    return {
        "set": {name: value for name, value in gates.items() if name not in absent},
        "absent": absent,
        "remove_runtime_config": sorted(remove),
        "queries": queries,
    }
