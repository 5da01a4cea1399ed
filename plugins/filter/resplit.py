# Copyright: gpusplit contributors
# Apache-2.0
"""Filters of a re-split: the plan diff, what the policy refuses, what fences the moving GPUs.

{{ gpusplit_fleet_plan | gpusplit.k8s.resplit_diff(hostvars, daemonsets, taint_rules, pods, claims) }}
{{ diff | gpusplit.k8s.resplit_refusals(gpusplit_resplit_policy, gpusplit_resplit_host_processes) }}
{{ gpusplit_fleet_plan | gpusplit.k8s.resplit_fence(diff, gpusplit_plugin_settings, 'NoSchedule') }}
{{ pods.resources | gpusplit.k8s.resplit_still_holding(diff) }}
{{ gpusplit_rollout_batch | gpusplit.k8s.rollout_batch(host_count) }}

The logic is in plugins/plugin_utils/resplit.py; each filter is documented in
plugins/filter/<name>.yml (ansible-doc -t filter gpusplit.k8s.<name>).
"""

from __future__ import annotations

from ansible_collections.gpusplit.k8s.plugins.plugin_utils.filter_errors import filters as wrap_filters
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.lazy import lazy

render = lazy("plugin_utils.render")
resplit = lazy("plugin_utils.resplit")
resplit_inventory = lazy("plugin_utils.resplit_inventory")
dra_render = lazy("plugin_utils._dra.render")


def resplit_diff(plan, hostvars, daemonsets=None, taint_rules=None, pods=None, claims=None):
    """Per node: the GPUs that move each way, the pods that hold a GPU leaving the Kubernetes share."""
    return resplit_inventory.resplit_from_inventory(plan, hostvars, daemonsets, taint_rules, pods, claims)


def resplit_refusals(diff, policy="refuse", host_processes="refuse"):
    """The messages that stop a re-split before any change ([] when it may go on)."""
    return resplit.resplit_refusals(diff, policy, host_processes)


def resplit_fence(plan, diff, settings=None, dra_effect="NoSchedule"):
    """What keeps new pods off the moving GPUs of the diff's fenced nodes.

    {objects, prune}: their new split DaemonSets and the prune of those no longer rendered;
    {dra_rules}: the host-share DeviceTaintRules of their held moving devices in mode dra.
    """
    hosts = resplit.fence_nodes(diff)
    sub = resplit.sub_plan(plan, hosts)
    objects = [o for o in render.render_fleet(sub, settings) if o.get("kind") == "DaemonSet"]
    uuids = {d["uuid"] for d in resplit.dra_fence_devices(diff, plan)}
    rules = [
        rule
        for rule in dra_render.host_share_rules(sub, dra_effect)
        if ((rule.get("metadata") or {}).get("annotations") or {}).get(resplit.ANNOTATION_UUID) in uuids
    ]
    return {"objects": objects, "prune": resplit.fence_prune(plan, hosts), "dra_rules": rules}


def resplit_still_holding(pods, diff):
    """The pods in the way (diff.holders) that are still there and running."""
    return resplit.still_holding(pods, diff)


def rollout_batch(value, total=0):
    """gpusplit_rollout_batch as a number of hosts (a percentage of ``total``, at least 1)."""
    return resplit.batch_size(value, total)


class FilterModule:
    def filters(self):
        return wrap_filters(
            (resplit_diff, resplit_refusals, resplit_fence, resplit_still_holding, rollout_batch)
        )
