# Copyright: gpusplit contributors
# Apache-2.0
"""The cluster picture one diagnosis reads once: nodes, GPU usage, events, PodGroups, DRA.

Private to the collection.
"""

from __future__ import annotations

from ansible_collections.gpusplit.k8s.plugins.module_utils._diagnose.dra_index import DraIndex
from ansible_collections.gpusplit.k8s.plugins.module_utils._diagnose.messages import parse_gang_message
from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.quantity import plain_number, quantity_number
from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.scheduling import (
    GPU_RESOURCE_PREFIXES,
    meta_of,
    pod_gpu_requests,
    pod_key,
    spec_of,
    status_of,
)

TERMINAL_PHASES = ("Succeeded", "Failed")


def _event_time(event):
    return (
        event.get("lastTimestamp")
        or event.get("eventTime")
        or ((event.get("series") or {}).get("lastObservedTime"))
        or meta_of(event).get("creationTimestamp")
        or ""
    )


def _scheduled_condition(pod):
    for cond in status_of(pod).get("conditions") or []:
        if cond.get("type") == "PodScheduled":
            return cond
    return None


class Cluster:
    """Every object of one diagnosis, indexed once: nodes by name, GPUs in use, events per pod."""

    def __init__(
        self, pods, nodes, events=None, podgroups=None, resource=None, prefixes=GPU_RESOURCE_PREFIXES
    ):
        self.prefixes = tuple(prefixes)
        self.pods = list(pods or [])
        self.nodes = sorted(nodes or [], key=lambda n: meta_of(n).get("name") or "")
        self.podgroups_served = podgroups is not None
        self.podgroups = {(meta_of(g).get("namespace"), meta_of(g).get("name")): g for g in podgroups or []}
        self.dra_served = resource is not None
        self.dra = DraIndex(resource)
        self.used = {}
        self.holders = {}
        self.members = {}
        for p in self.pods:
            spec, phase = spec_of(p), status_of(p).get("phase")
            if phase in TERMINAL_PHASES:
                continue
            node = spec.get("nodeName")
            if node:
                for r, amount in pod_gpu_requests(p, self.prefixes).items():
                    self.used.setdefault(node, {})[r] = self.used.get(node, {}).get(r, 0) + amount
                    self.holders.setdefault((node, r), []).append((pod_key(p), amount))
            group = (spec.get("schedulingGroup") or {}).get("podGroupName")
            if group:
                self.members.setdefault((meta_of(p).get("namespace") or "default", group), []).append(p)
        self.events = {}
        for e in sorted(events or [], key=_event_time):
            obj = e.get("involvedObject") or e.get("regarding") or {}
            if obj.get("kind") not in (None, "Pod"):
                continue
            key = f"{obj.get('namespace') or 'default'}/{obj.get('name')}"
            self.events.setdefault(key, []).append(e)

    def allocatable(self, node, resource):
        return quantity_number((status_of(node).get("allocatable") or {}).get(resource))

    def node_usage(self, node, resource):
        name = meta_of(node).get("name")
        alloc = self.allocatable(node, resource)
        used = self.used.get(name, {}).get(resource, 0)
        used = plain_number(used)
        holders = sorted(self.holders.get((name, resource), []))
        return {
            "allocatable": alloc,
            "requested": used,
            "free": alloc - used,
            "holders": [f"{k} ({v:g})" for k, v in holders[:5]] + (["..."] if len(holders) > 5 else []),
        }

    def pod_messages(self, pod):
        """(PodScheduled message or None, the pod's FailedScheduling event messages, newest last)."""
        cond = _scheduled_condition(pod)
        message = cond.get("message") if cond and cond.get("status") == "False" else None
        events = [e.get("message") or e.get("note") or "" for e in self.events.get(pod_key(pod), [])]
        return message, events


def gang_state(cl, pod):
    """None, or {group, policy, min_count, present, bound, exists} for a pod in a PodGroup."""
    group = (spec_of(pod).get("schedulingGroup") or {}).get("podGroupName")
    if not group or not cl.podgroups_served:
        return None
    ns = meta_of(pod).get("namespace") or "default"
    pg = cl.podgroups.get((ns, group))
    members = cl.members.get((ns, group), [])
    state = {
        "group": f"{ns}/{group}",
        "exists": pg is not None,
        "present": len(members),
        "bound": sum(1 for m in members if spec_of(m).get("nodeName")),
    }
    if pg is None:
        return state
    policy = spec_of(pg).get("schedulingPolicy") or {}
    state["policy"] = "gang" if policy.get("gang") is not None else "basic"
    state["min_count"] = int((policy.get("gang") or {}).get("minCount") or 0) or None
    for cond in status_of(pg).get("conditions") or []:
        if cond.get("type") == "PodGroupInitiallyScheduled":
            state["condition"] = {k: cond.get(k) for k in ("status", "reason", "message")}
    gang_events = []
    for m in members:
        for e in cl.events.get(pod_key(m), []):
            msg = e.get("message") or e.get("note") or ""
            if parse_gang_message(msg) and msg not in gang_events:
                gang_events.append(msg)
    cond = state.get("condition") or {}
    if cond.get("status") == "False" and cond.get("message") and cond["message"] not in gang_events:
        gang_events.append(cond["message"])  # the scheduler's verdict on the whole group
    state["gang_messages"] = gang_events[-3:]
    return state
