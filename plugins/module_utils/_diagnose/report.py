# Copyright: gpusplit contributors
# Apache-2.0
"""Why are GPU pods Pending? The whole diagnosis over objects read once from the cluster.

Private to the collection.

Inputs are plain dicts (as the API returns them): all pods, all nodes, FailedScheduling events,
PodGroups (None when scheduling.k8s.io/v1beta1 is not served) and the DRA objects (None when
resource.k8s.io/v1 is not served). No I/O, no Ansible imports. The classes and how each is
found are the rule table (``rules.RULES``); ``classify.classify_pod`` walks it for each pod.

Facts this rests on (Kubernetes v1.37.2, checked in the lab and in the Go sources):

* The scheduler's PodScheduled message counts nodes per first failing filter, in filter order
  (NodeUnschedulable, NodeName, TaintToleration, NodeAffinity, NodeResourcesFit, ...,
  DynamicResources): "0/9 nodes are available: 1 Insufficient nvidia.com/gpu, 2 node(s) had
  untolerated taint(s), 6 node(s) didn't match Pod's node affinity/selector. preemption: ...".
  Nodes that do not even match the pod's selector are often counted as "untolerated taint"
  (taints are checked first), and the message never names a taint. So the candidate nodes and
  their blockers are computed here from the objects; the message is the fallback and is quoted.
* DRA failures all read "cannot allocate all claims"; whether a device taint or the lack of a
  matching device is the cause is computed from ResourceSlices, DeviceTaintRules, DeviceClasses
  and ResourceClaims.
* Gang scheduling (GenericWorkload, scheduling.k8s.io/v1beta1): a pod names its group with
  spec.schedulingGroup.podGroupName; while fewer than gang.minCount member pods exist the
  scheduler holds them in PreEnqueue and writes no condition at all. When the quorum exists but
  cannot be placed, members get FailedScheduling events such as "minCount (2) cannot be
  satisfied: 0 scheduled, 1 remaining" and the PodGroup a PodGroupInitiallyScheduled=False
  condition.
"""

from __future__ import annotations

import json

from ansible_collections.gpusplit.k8s.plugins.module_utils._diagnose import rules
from ansible_collections.gpusplit.k8s.plugins.module_utils._diagnose.classify import classify_pod
from ansible_collections.gpusplit.k8s.plugins.module_utils._diagnose.snapshot import Cluster
from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.scheduling import (
    GPU_RESOURCE_PREFIXES,
    is_unscheduled_pending,
    meta_of,
    pod_key,
    wants_gpu,
)


def diagnose(
    pods, nodes, events=None, podgroups=None, resource=None, namespaces=None, prefixes=GPU_RESOURCE_PREFIXES
):
    """{pods: [one entry per unscheduled GPU pod], counts: {class: n}, apis: {...}}.

    ``podgroups``/``resource``: None when the API is not served (the entries then say so).
    ``namespaces``: only diagnose pods there (all pods still count for node usage).
    """
    cl = Cluster(pods, nodes, events, podgroups, resource, prefixes)
    wanted = set(namespaces or [])
    entries = []
    for pod in sorted(cl.pods, key=pod_key):
        if wanted and (meta_of(pod).get("namespace") or "default") not in wanted:
            continue
        if not is_unscheduled_pending(pod) or not wants_gpu(pod, cl.prefixes):
            continue
        entries.append(classify_pod(cl, pod))
    counts = {r.name: 0 for r in rules.RULES}  # in priority order
    for e in entries:
        counts[e["class"]] += 1
    return {
        "pods": entries,
        "counts": {k: v for k, v in counts.items() if v},
        "apis": {"podgroups": cl.podgroups_served, "dra": cl.dra_served},
    }


def report_table(report, width=None):
    """One line per pod: POD, CLASS, REASON, NEXT."""
    header = ("POD", "CLASS", "REASON", "NEXT")
    rows = [(e["pod"], e["class"], e["summary"], e["next"]) for e in report["pods"]]
    if not rows:
        return "no Pending GPU pods"
    w0 = max(len(r[0]) for r in [header, *rows])
    w1 = max(len(r[1]) for r in [header, *rows])
    lines = []
    for r in [header, *rows]:
        reason, nxt = r[2], r[3]
        if width:
            reason = reason if len(reason) <= width else reason[: width - 3] + "..."
        lines.append(f"{r[0].ljust(w0)}  {r[1].ljust(w1)}  {reason}  -> {nxt}")
    counts = ", ".join(f"{v} {k}" for k, v in report["counts"].items())
    lines.append(f"{len(rows)} Pending GPU pod(s): {counts}")
    return "\n".join(lines)


def dumps(report):
    return json.dumps(report, indent=2, sort_keys=True, default=str)
