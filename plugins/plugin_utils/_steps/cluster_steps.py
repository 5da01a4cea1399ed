# Copyright: gpusplit contributors
# Apache-2.0
"""The cluster-side roles' steps: gpu_split_cluster, dra_split, gpu_resplit (and playbooks/resplit.yml),
gpu_operator. Private to the collection.
"""

from __future__ import annotations

from ansible_collections.gpusplit.k8s.plugins.plugin_utils._steps.registry import (
    connection_args,
    list_input,
    mapping_input,
    step,
    unique_in,
    wait_pods,
)
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.lazy import lazy

api_versions = lazy("module_utils._control_plane.api_versions")
compare = lazy("module_utils._k8s.compare")
dra_names = lazy("module_utils._dra.names")
dra_published = lazy("plugin_utils._dra.published")
dra_render = lazy("plugin_utils._dra.render")
dra_rules = lazy("plugin_utils._dra.rule_plan")
gpu_operator = lazy("plugin_utils.gpu_operator")
inventory_vars = lazy("plugin_utils.inventory_vars")
operator_checks = lazy("plugin_utils.gpu_operator_checks")
render = lazy("plugin_utils.split_render")
resplit = lazy("plugin_utils.resplit")
resplit_inventory = lazy("plugin_utils.resplit_inventory")
rollout = lazy("plugin_utils.rollout")
sharing = lazy("module_utils._split.sharing")
stock_plugin = lazy("plugin_utils.stock_plugin")

# the label selector of gpusplit's split device-plugin DaemonSets (what the prune may remove)
SPLIT_PLUGIN_SELECTOR = "app.kubernetes.io/managed-by=gpusplit,app.kubernetes.io/name=gpusplit-device-plugin"


# --------------------------------------------------------------------------------------------
# every role that writes or reads a versioned API


@step
def cluster_api_versions(inputs, context):
    """``api_versions``: per use (module_utils/_control_plane/api_versions.py APIS), the group/version the cluster serves it
    in, None where it serves none gpusplit speaks; ``refusals``: per such use, why, with the version it needs and the
    gates and runtime-config that serve it on the cluster's release; ``kubernetes_version``: the server's.

    inputs: cluster_info (kubernetes.core.k8s_cluster_info's result), uses.
    """
    info = mapping_input(inputs, "cluster_info")
    server = mapping_input(mapping_input(info, "version"), "server")
    git_version = mapping_input(server, "kubernetes").get("gitVersion")
    uses = list_input(inputs, "uses")
    unknown = [use for use in uses if use not in api_versions.APIS]
    if unknown:
        raise api_versions.ApiVersionError(
            f"uses: unknown {', '.join(map(str, unknown))} (known: {', '.join(api_versions.APIS)})"
        )
    return api_versions.choose(uses, info.get("apis"), git_version)


# --------------------------------------------------------------------------------------------
# gpu_split_cluster


@step
def split_cluster(inputs, context):
    """What the cluster side works out before it changes anything, in one task: the checks
    (:func:`split_cluster_checks`), whether they refuse the run (:func:`split_cluster_refusals`), and, where
    they do not, every object it applies (:func:`split_cluster_objects`). A refused run renders nothing, so
    that its refusal is the one the role reports even where the rendering would refuse too.

    inputs: plan, live (cluster_read's resources: daemonsets, labelled), operator_managed, prune_scope,
    gpu_taint, plugin_settings, field_manager, stock_plugin_action, gpu_hosts (the hosts of the GPU groups).
    """
    checks = split_cluster_checks(inputs, context)
    refusals = split_cluster_refusals(checks, inputs.get("stock_plugin_action"))
    if any(refusals.values()):
        return {**checks, **refusals}
    taken = {key: checks[key] for key in ("inventory_nodes", "prune", "foreign")}
    return {**checks, **refusals, **split_cluster_objects({**inputs, **taken}, context)}


def split_cluster_refusals(checks, stock_plugin_action):
    """``helm_refused``: a device plugin installed by Helm would run on a split node (never patched);
    ``foreign_refused``: one gpusplit does not own would, and ``stock_plugin_action`` is refuse."""
    split = bool(checks["split_nodes"])
    return {
        "helm_refused": split and bool(checks["helm"]),
        "foreign_refused": split and bool(checks["foreign"]) and stock_plugin_action == "refuse",
    }


def split_cluster_checks(inputs, context):
    """Before any change: the device plugins gpusplit does not own that could run on a split node (those
    installed by Helm, with the values that exclude them), the split nodes, every inventory host's node, the
    prune's scope, and how to list the foreign plugins' pods.

    inputs: plan, live (cluster_read's resources: daemonsets, labelled), operator_managed, prune_scope.
    """
    plan = mapping_input(inputs, "plan")
    live = mapping_input(inputs, "live")
    daemonsets = live.get("daemonsets") or []
    foreign = operator_checks.colliding_plugin_daemonsets(
        daemonsets, plan, bool(inputs.get("operator_managed"))
    )
    inventory = inventory_vars.inventory_nodes(context.hostvars, context.groups.get("all") or [])
    nodes = mapping_input(plan, "nodes") if isinstance(plan.get("nodes"), dict) else {}
    return {
        "foreign": foreign,
        "helm": stock_plugin.helm_managed(foreign),
        "split_nodes": [p["node"] for p in nodes.values() if p.get("split")],
        "inventory_nodes": inventory,
        "prune": render.prune_scope(
            SPLIT_PLUGIN_SELECTOR, plan, inventory, inputs.get("prune_scope", "inventory")
        ),
        "pod_queries": stock_plugin.pod_queries(daemonsets),
    }


def split_cluster_objects(inputs, context):
    """Every object the cluster side applies, and what of it this run's read shows applied already.

    inputs: plan, live (daemonsets, labelled), inventory_nodes and prune (split_cluster_checks), foreign,
    operator_managed, gpu_taint, prune_scope, plugin_settings, field_manager, stock_plugin_action, gpu_hosts
    (the hosts of the GPU groups).
    """
    plan = mapping_input(inputs, "plan")
    live = mapping_input(inputs, "live")
    labelled = live.get("labelled") or []
    settings = mapping_input(inputs, "plugin_settings")
    inventory = list_input(inputs, "inventory_nodes")
    scope = inputs.get("prune_scope", "inventory")
    gpu_taint = bool(inputs.get("gpu_taint"))
    operator_managed = bool(inputs.get("operator_managed"))
    field_manager = inputs.get("field_manager") or "gpusplit"
    node_patches = render.render_node_patches(plan, operator_managed, gpu_taint)
    departed = render.departed_nodes(labelled, plan, inventory, scope)
    exclusions = []
    if inputs.get("stock_plugin_action") == "exclude":
        for ds in list_input(inputs, "foreign"):
            meta = ds.get("metadata") or {}
            own = {
                **settings,
                "stock_plugin_name": meta.get("name"),
                "stock_plugin_namespace": meta.get("namespace"),
            }
            exclusions.append(render.render_stock_plugin_exclusion(own, ds))
    gpu_host_nodes = inventory_vars.inventory_nodes(context.hostvars, list_input(inputs, "gpu_hosts"))
    kept = (mapping_input(inputs, "prune").get("kept")) or []
    return {
        "node_patches": node_patches,
        "node_patches_needed": [
            compare.key_text(compare.object_key(obj))
            for obj in compare.needing_apply(node_patches, labelled, field_manager)
        ],
        "departed": departed,
        "release_patches": render.render_release_patches(departed),
        "exclusions": exclusions,
        "unplanned": unique_in(kept, gpu_host_nodes),
        "objects": render.render_fleet(plan, settings),
        "taint_nodes": render.gpu_taint_nodes(labelled, plan, gpu_taint, inventory, scope),
    }


@step
def split_cluster_stock_wait(inputs, context):
    """Waits until no pod of a device plugin gpusplit does not own is left on a split node; ``left``: those
    still there after ``wait_seconds``.

    inputs: plan, pod_queries (split_cluster), wait_seconds, kubeconfig, context.
    """
    plan = mapping_input(inputs, "plan")
    queries = [
        {
            "api_version": "v1",
            "kind": "Pod",
            "namespace": q["namespace"],
            "label_selectors": q["label_selectors"],
            **connection_args(inputs),
        }
        for q in list_input(inputs, "pod_queries")
    ]
    retries = max(1, int(inputs.get("wait_seconds") or 0) // 2)
    lists = wait_pods(context, queries, lambda pods: stock_plugin.pods_on_split_nodes(pods, plan), retries, 2)
    return {"left": stock_plugin.pods_on_split_nodes([p for pods in lists for p in pods], plan)}


# --------------------------------------------------------------------------------------------
# dra_split (and the DRA parts of other roles)


@step
def dra_split_scope(inputs, context):
    """``nodes``: the node plans in mode dra; ``prune``: which host-share DeviceTaintRules a run may prune (nodes
    still in the inventory but not planned in this run keep theirs).

    inputs: plan, prune_selector, prune_scope.
    """
    plan = mapping_input(inputs, "plan")
    inventory = inventory_vars.inventory_nodes(context.hostvars, context.groups.get("all") or [])
    return {
        "nodes": dra_names.dra_node_plans(plan),
        "prune": render.prune_scope(
            inputs.get("prune_selector"), plan, inventory, inputs.get("prune_scope", "inventory")
        ),
    }


@step
def dra_check_published(inputs, context):
    """What the DRA driver publishes against the plan: ``ok``, ``errors`` (a device that is another GPU than
    planned) and ``unpublished`` (what is not published yet).

    inputs: plan, slices (the live ResourceSlices).
    """
    checked = dra_published.check_published(mapping_input(inputs, "plan"), inputs.get("slices"))
    # (a task result's own "warnings" would be shown as Ansible warnings and taken out of the result)
    return {
        "ok": checked["ok"],
        "errors": checked["errors"],
        "unpublished": checked["warnings"],
        "nodes": checked["nodes"],
    }


@step
def dra_split_objects(inputs, context):
    """``rules``: one DeviceTaintRule per host-share and excluded device of every node in mode dra (the MIG devices
    of a reserved MIG-enabled GPU too, from ``slices``); ``node_patches``: gpusplit's labels of those nodes;
    ``table``: the rules for a person, line by line; ``unplanned``: the kept nodes of the GPU groups' hosts;
    ``device_classes`` (and ``device_class_selector``, what a run prunes): gpusplit's DeviceClasses of the
    time-sliced Kubernetes shares.

    inputs: plan, effect, slices, operator_managed, kept (dra_split_scope's prune), gpu_hosts, api_version (the
    DeviceTaintRule group/version to write, from cluster_api_versions).
    """
    rules = dra_render.host_share_rules(
        inputs.get("plan"), inputs.get("effect", "NoSchedule"), inputs.get("slices")
    )
    # the version the cluster serves (cluster_api_versions); resource.k8s.io/v1 as rendered otherwise
    if inputs.get("api_version"):
        rules = api_versions.with_version(rules, "device_taint_rule", inputs["api_version"])
    plan = mapping_input(inputs, "plan")
    operator_managed = bool(inputs.get("operator_managed"))
    gpu_host_nodes = inventory_vars.inventory_nodes(context.hostvars, list_input(inputs, "gpu_hosts"))
    return {
        "rules": rules,
        "node_patches": [
            render.render_node_patch(p, operator_managed) for p in dra_names.dra_node_plans(plan)
        ],
        "table": dra_rules.rules_table(rules).split("\n"),
        "unplanned": unique_in(list_input(inputs, "kept"), gpu_host_nodes),
        "device_classes": dra_render.sharing_device_classes(plan),
        "device_class_selector": sharing.DRA_CLASS_SELECTOR,
    }


# --------------------------------------------------------------------------------------------
# gpu_resplit, playbooks/resplit.yml


@step
def dra_nodes(inputs, context):
    """``nodes``: the node plans in mode dra.

    inputs: plan.
    """
    return {"nodes": dra_names.dra_node_plans(mapping_input(inputs, "plan"))}


@step
def resplit_diff(inputs, context):
    """``plan_diff``: per node the GPUs that move each way and the pods that hold a GPU leaving the Kubernetes share;
    ``refusals``: what the policy refuses before any change ([] when the re-split may go on).

    inputs: plan, daemonsets, rules, pods, claims (what the role read of the cluster), policy, host_processes.
    """
    diff = resplit_inventory.resplit_from_inventory(
        inputs.get("plan"),
        context.hostvars,
        inputs.get("daemonsets"),
        inputs.get("rules"),
        inputs.get("pods"),
        inputs.get("claims"),
    )
    refusals = resplit.resplit_refusals(
        diff, inputs.get("policy", "refuse"), inputs.get("host_processes", "refuse")
    )
    return {"plan_diff": diff, "refusals": refusals}


@step
def resplit_fence(inputs, context):
    """What keeps new pods off the moving GPUs of the diff's fenced nodes: ``objects`` and ``prune`` (their new
    split DaemonSets, the prune of those no longer rendered) and ``dra_rules`` (the host-share DeviceTaintRules
    of their held moving devices in mode dra).

    inputs: plan, diff, plugin_settings, dra_effect.
    """
    plan, diff = inputs.get("plan"), inputs.get("diff")
    hosts = resplit.fence_nodes(diff)
    sub = resplit.sub_plan(plan, hosts)
    objects = [
        o for o in render.render_fleet(sub, inputs.get("plugin_settings")) if o.get("kind") == "DaemonSet"
    ]
    uuids = {d["uuid"] for d in resplit.dra_fence_devices(diff, plan)}
    rules = [
        rule
        for rule in dra_render.host_share_rules(sub, inputs.get("dra_effect", "NoSchedule"))
        if ((rule.get("metadata") or {}).get("annotations") or {}).get(resplit.ANNOTATION_UUID) in uuids
    ]
    return {"objects": objects, "prune": resplit.fence_prune(plan, hosts), "dra_rules": rules}


@step
def resplit_wait(inputs, context):
    """Waits until the pods in the diff's way have finished; ``left``: those still there after ``wait_seconds``.

    inputs: diff, wait_seconds, kubeconfig, context.
    """
    diff = inputs.get("diff")
    query = {"api_version": "v1", "kind": "Pod", **connection_args(inputs)}
    retries = max(1, int(inputs.get("wait_seconds") or 0) // 5)
    (pods,) = wait_pods(context, [query], lambda found: resplit.still_holding(found, diff), retries, 5)
    return {"left": resplit.still_holding(pods, diff)}


@step
def rollout_batch(inputs, context):
    """``size``: gpusplit_rollout_batch as a number of hosts, as Ansible's ``serial`` reads it (a percentage of
    ``total`` rounded down, at least 1).

    inputs: batch, total.
    """
    return {"size": rollout.batch_size(inputs.get("batch"), inputs.get("total") or 0)}


# --------------------------------------------------------------------------------------------
# gpu_operator


def _mig_configs(hostvars, hosts):
    """{host: gpusplit_mig_config} for the hosts that set one."""
    out = {}
    for host in hosts:
        if not isinstance(host, str) or host not in hostvars:
            raise gpu_operator.OperatorError(
                f"host {host!r} is not in the inventory (hostvars has no such host)"
            )
        value = hostvars[host].get("gpusplit_mig_config")
        if value not in (None, ""):
            out[host] = value
    return out


@step
def operator_config(inputs, context):
    """``config``: what the role gpu_operator applies (ClusterPolicy fields, Helm values, MIG labels, summary,
    warnings), decided up front with every refusal at once. Each planned host's gpusplit_mig_config comes from
    the inventory, the split plugins' hardening from their settings as they are rendered.

    inputs: plan, settings (the role's), plugin_settings, clusterpolicies, nodes, daemonsets; after gpusplit's Helm
    install: helm_release ({namespace, release}) and clusterpolicies_before (the record then names the release).
    """
    plan = mapping_input(inputs, "plan")
    settings = dict(mapping_input(inputs, "settings"))
    settings["plugin_hardening"] = render.resolve_settings(inputs.get("plugin_settings") or {})["hardening"]
    nodes = plan.get("nodes") if isinstance(plan.get("nodes"), dict) else {}
    config = gpu_operator.operator_config(
        plan,
        _mig_configs(context.hostvars, list(nodes)),
        inputs.get("clusterpolicies"),
        settings,
        inputs.get("nodes"),
        inputs.get("daemonsets"),
        installed=gpu_operator.install_marker(
            inputs.get("helm_release"), inputs.get("clusterpolicies_before")
        ),
    )
    return {"config": config}


@step
def operator_settle_wait(inputs, context):
    """Waits until the GPU Operator's device plugin has left every split node; ``left``: its pods still on one
    after ``wait_seconds``.

    inputs: plan, namespace, wait_seconds, kubeconfig, context.
    """
    plan = mapping_input(inputs, "plan")
    query = {
        "api_version": "v1",
        "kind": "Pod",
        "namespace": inputs.get("namespace"),
        **connection_args(inputs),
    }
    retries = max(1, int(inputs.get("wait_seconds") or 0) // 2)
    (pods,) = wait_pods(
        context,
        [query],
        lambda found: operator_checks.operator_plugin_pods_on_split_nodes(found, plan),
        retries,
        2,
    )
    return {"left": operator_checks.operator_plugin_pods_on_split_nodes(pods, plan)}
