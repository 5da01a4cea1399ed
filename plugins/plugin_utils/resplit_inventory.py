# Copyright: gpusplit contributors
# Apache-2.0
"""The re-split's inputs from the inventory: each planned host's pod-resources answer (read by this run's
discovery), its GPU facts and its host services, handed to ``resplit.resplit_diff``."""

from __future__ import annotations

from collections.abc import Mapping

from ansible_collections.gpusplit.k8s.plugins.plugin_utils.resplit import (
    ResplitError,
    _list,
    _mapping,
    dra_fence_devices,
    fence_nodes,
    resplit_diff,
    resplit_table,
)

# the discovery's result: nvidia_gpu_facts reads the pod resources in the same call (role gpu_discovery)
DISCOVERY_VAR = "gpu_discovery_result"


UNREAD = {
    "no result": "this run's discovery (role gpu_discovery) has no result for the host: run it on the host first",
    "off": "the discovery did not read them (gpusplit_discovery_pod_resources is false for the host): set it "
    "to true, the default",
    "error": "the discovery could not read them: {error}. Check the kubelet's pod-resources socket "
    "(gpusplit_pod_resources_socket) and its permissions, then run this again",
}


def _reading(hostvars_of_host):
    """(the host's pod-resources answer of this run's discovery, None) or (None, why there is none)."""
    result = hostvars_of_host.get(DISCOVERY_VAR)
    if not isinstance(result, Mapping):
        return None, UNREAD["no result"]
    found = result.get("pod_resources")
    if not isinstance(found, Mapping):
        return None, UNREAD["off"]
    if found.get("error"):
        return None, UNREAD["error"].format(error=found["error"])
    return found, None


def pod_resources_of(hostvars_of_host):
    """The host's pod-resources answer of this run's discovery; None where it has none."""
    return _reading(hostvars_of_host)[0]


def pod_resources_unread(hostvars_of_host):
    """Why this run has no pod-resources answer of the host, with what to do; None where it has one."""
    return _reading(hostvars_of_host)[1]


def resplit_from_inventory(plan, hostvars, daemonsets=None, taint_rules=None, pods=None, claims=None):
    """resplit_diff with each planned host's inputs taken from its variables.

    Per host of the plan: the pod-resources answer of this run's discovery (pod_resources_of; where it
    has none, pod_resources_unread says why), the GPU facts (``nvidia_gpus``) and
    ``gpusplit_host_services``. The result also carries ``table`` (resplit_table), ``fence_hosts`` and
    ``dra_fence`` (dra_fence_devices).
    """
    nodes = _mapping(_mapping(plan, "plan").get("nodes"), "plan.nodes")
    pod_resources, unread, facts, services = {}, {}, {}, {}
    for host in nodes:
        if host not in hostvars:
            raise ResplitError(
                f"host {host!r} of the plan is not in the inventory (hostvars has no such host)"
            )
        hv = hostvars[host]
        answer, why = _reading(hv)
        if answer is not None:
            pod_resources[host] = answer
        else:
            unread[host] = why
        found = (hv.get("ansible_facts") or {}).get("nvidia_gpus", hv.get("nvidia_gpus"))
        if found is not None:
            facts[host] = found
        services[host] = _list(hv.get("gpusplit_host_services"), f"{host}: gpusplit_host_services")
    diff = resplit_diff(plan, pod_resources, daemonsets, taint_rules, pods, claims, facts, services, unread)
    diff["table"] = resplit_table(diff)
    diff["fence_hosts"] = fence_nodes(diff)
    diff["dra_fence"] = dra_fence_devices(diff, plan)
    return diff
