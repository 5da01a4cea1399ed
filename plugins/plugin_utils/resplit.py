# Copyright: gpusplit contributors
# Apache-2.0
"""Changing the split of a busy fleet: who holds the GPUs that move, and what to do about it.

A re-plan may move a GPU out of a node's Kubernetes share (to the host, or out of use). The kubelet
does not evict a pod whose device disappeared from the plugin's list, so before anything changes
the run must know who holds each GPU. The sources, per node:

- the kubelet's pod-resources ``List`` (read on the host by the discovery, ``nvidia_gpu_facts``, with
  the client of module ``gpu_pod_resources``; resplit_inventory.py takes it from there): the device ids
  each container got from a device plugin (GPU UUIDs, MIG UUIDs, or indices), and the devices of
  its ResourceClaims;
- the allocated ResourceClaims of the cluster (mode ``dra``): ``status.allocation.devices`` names
  the driver's devices of the node, ``status.reservedFor`` the pods;
- the GPU facts' processes (``in_container`` from their cgroups): a container process on a moving
  GPU that no pod is known to hold is reported, not hidden.

``resplit_diff`` compares the plan with the live split (the per-node split DaemonSet's
``NVIDIA_VISIBLE_DEVICES`` or the DRA host-share DeviceTaintRules) and names, per node, the GPUs
that move each way and the pods that hold a GPU leaving the Kubernetes share. ``resplit_table``
prints it; ``resplit_refusals`` says what the chosen policy refuses; ``fence_objects`` and
``fence_prune`` are what is applied first so that no new pod lands on a moving GPU.
"""

from __future__ import annotations

from ansible_collections.gpusplit.k8s.plugins.module_utils._dra.names import DRIVER, device_name
from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError, type_name
from ansible_collections.gpusplit.k8s.plugins.module_utils._gpu.ids import normalize_uuid
from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.names import (
    LABEL_MANAGED_BY,
    LABEL_NAME,
    LABEL_NODE,
    MANAGED_BY,
    label_value,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._split.modes import SHARE_DRA, find_mode
from ansible_collections.gpusplit.k8s.plugins.module_utils._split.planner import SHARE_HOST
from ansible_collections.gpusplit.k8s.plugins.module_utils._split.sharing import (
    ANNOTATION_SHARING,
    device_of_replica,
    sharing_text,
)

POLICIES = ("refuse", "evict", "wait")
HOST_PROCESS_POLICIES = ("refuse", "ignore")
PLUGIN_APP_NAME = "gpusplit-device-plugin"
PLUGIN_SELECTOR = f"{LABEL_MANAGED_BY}={MANAGED_BY},{LABEL_NAME}={PLUGIN_APP_NAME}"
ANNOTATION_NODE_NAME = "gpusplit.io/node-name"
ANNOTATION_UUID = "gpusplit.io/gpu-uuid"


class ResplitError(GpusplitError):
    """A re-split refused: its inputs, or the policy's verdict on the pods and processes found."""

    title = "re-split"


def _mapping(value, what):
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ResplitError(f"{what}: expected a mapping, got {type_name(value)}")
    return value


def _list(value, what):
    if value is None:
        return []
    if not isinstance(value, list):
        raise ResplitError(f"{what}: expected a list, got {type_name(value)}")
    return value


def check_policy(policy, host_processes="refuse"):
    errors = []
    if policy not in POLICIES:
        errors.append(f"gpusplit_resplit_policy: {policy!r} is not one of {', '.join(POLICIES)}")
    if host_processes not in HOST_PROCESS_POLICIES:
        errors.append(
            f"gpusplit_resplit_host_processes: {host_processes!r} is not one of {', '.join(HOST_PROCESS_POLICIES)}"
        )
    if errors:
        raise ResplitError(errors)


# ---------------------------------------------------------------------------------------------
# the GPUs of a node and the ids that name them


class GpuIndex:
    """Every id that names a GPU of one node plan: UUID, MIG UUIDs, index, the DRA driver's device name."""

    def __init__(self, node_plan):
        self.gpus = node_plan.get("gpus") or []
        self.by_id = {}
        for gpu in self.gpus:
            uuid = normalize_uuid(gpu.get("uuid") or "")
            ref = {"uuid": gpu.get("uuid"), "index": gpu.get("index")}
            for key in (uuid, str(gpu.get("index"))):
                self.by_id.setdefault(key, ref)
            for mig in gpu.get("mig_uuids") or []:
                self.by_id.setdefault(normalize_uuid(mig), ref)
            if gpu.get("minor_number") is not None:  # the DRA driver names a GPU gpu-<minor>
                self.by_id.setdefault(f"dra:{device_name(gpu['minor_number'])}", ref)

    def gpu(self, device_id):
        if device_id is None:
            return None
        text = device_of_replica(str(device_id).strip())
        return self.by_id.get(normalize_uuid(text)) or self.by_id.get(text)

    def dra(self, device):
        return self.by_id.get(f"dra:{device}")


def _kubernetes_uuids(node_plan):
    return [g["uuid"] for g in node_plan.get("gpus") or [] if g.get("share") == "kubernetes"]


# ---------------------------------------------------------------------------------------------
# the split as it is in the cluster


def _plugin_container_env(ds):
    for container in ((ds.get("spec") or {}).get("template") or {}).get("spec", {}).get("containers") or []:
        for env in container.get("env") or []:
            if env.get("name") == "NVIDIA_VISIBLE_DEVICES":
                return env.get("value")
    return None


def live_shares(plan, daemonsets=None, taint_rules=None):
    """{node: {"kubernetes": [GPU UUID] or None, "source": ...}} as the cluster has it now.

    A node with a split DaemonSet: the GPUs its NVIDIA_VISIBLE_DEVICES names. A node in mode dra
    with gpusplit's host-share DeviceTaintRules: every GPU but the tainted ones. Otherwise None
    (no split yet: what the node's own device plugin advertised is not known here).
    """
    nodes = _mapping((plan or {}).get("nodes"), "plan.nodes")
    by_node = {}
    sharing = {}
    for ds in _list(daemonsets, "daemonsets"):
        meta = (ds or {}).get("metadata") or {}
        node = (meta.get("annotations") or {}).get(ANNOTATION_NODE_NAME)
        if node:
            by_node[node] = _plugin_container_env(ds)
            sharing[node] = (meta.get("annotations") or {}).get(ANNOTATION_SHARING) or sharing_text(None)
    tainted = {}
    for rule in _list(taint_rules, "taint rules"):
        meta = (rule or {}).get("metadata") or {}
        node = (meta.get("annotations") or {}).get(ANNOTATION_NODE_NAME) or (
            ((rule.get("spec") or {}).get("deviceSelector") or {}).get("pool")
        )
        uuid = (meta.get("annotations") or {}).get(ANNOTATION_UUID)
        if node and uuid:
            tainted.setdefault(node, set()).add(normalize_uuid(uuid))
    out = {}
    for node_plan in nodes.values():
        node = node_plan["node"]
        index = GpuIndex(node_plan)
        if node in by_node:
            ids = [v.strip() for v in (by_node[node] or "").split(",") if v.strip()]
            if ids in (["all"],):
                share = [g["uuid"] for g in index.gpus]
            elif ids in (["none"], ["void"]):
                share = []
            else:
                share = []
                for device_id in ids:
                    gpu = index.gpu(device_id)
                    if gpu and gpu["uuid"] not in share:
                        share.append(gpu["uuid"])
            out[node] = {"kubernetes": share, "source": "split DaemonSet", "sharing": sharing[node]}
        elif node in tainted:
            share = [g["uuid"] for g in index.gpus if normalize_uuid(g["uuid"]) not in tainted[node]]
            out[node] = {"kubernetes": share, "source": "DeviceTaintRules"}
        else:
            out[node] = {"kubernetes": None, "source": "no split yet"}
    return out


# ---------------------------------------------------------------------------------------------
# who holds the GPUs


def _owner(pod):
    for ref in ((pod or {}).get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return f"{ref.get('kind')}/{ref.get('name')}"
    refs = ((pod or {}).get("metadata") or {}).get("ownerReferences") or []
    return f"{refs[0].get('kind')}/{refs[0].get('name')}" if refs else None


def _pods_by_name(pods):
    out = {}
    for pod in _list(pods, "pods"):
        meta = (pod or {}).get("metadata") or {}
        out[(meta.get("namespace"), meta.get("name"))] = pod
    return out


def _active(pod):
    return ((pod or {}).get("status") or {}).get("phase") not in ("Succeeded", "Failed")


def device_plugin_holders(node_plan, pod_resources, pods_by_name):
    """Holders of the node's GPUs from the kubelet's pod-resources answer (module gpu_pod_resources)."""
    index = GpuIndex(node_plan)
    out = []
    for entry in (pod_resources or {}).get("holders") or []:
        if entry.get("resource_name") is None:
            continue  # a claim's device: ResourceClaims are read from the API (claim_holders)
        gpu = index.gpu(entry.get("device_id"))
        key = (entry.get("namespace"), entry.get("pod"))
        pod = pods_by_name.get(key)
        if pod is not None and not _active(pod):
            continue
        out.append(
            {
                "namespace": key[0],
                "pod": key[1],
                "uid": ((pod or {}).get("metadata") or {}).get("uid"),
                "owner": _owner(pod),
                "container": entry.get("container"),
                "resource_name": entry.get("resource_name"),
                "device_id": entry.get("device_id"),
                "gpu": gpu["uuid"] if gpu else None,
                "index": gpu["index"] if gpu else None,
                "via": "device plugin",
            }
        )
    return out


def claim_results_by_pool(claims, driver=DRIVER):
    """{pool (node): [(claim metadata, claim status, allocation result)]} of ``driver``'s allocated devices."""
    out = {}
    for claim in _list(claims, "resource claims"):
        meta = (claim or {}).get("metadata") or {}
        status = (claim or {}).get("status") or {}
        for result in ((status.get("allocation") or {}).get("devices") or {}).get("results") or []:
            if result.get("driver") == driver:
                out.setdefault(result.get("pool"), []).append((meta, status, result))
    return out


def claim_holders(node_plan, results, pods_by_name):
    """Holders of the node's GPUs through allocated ResourceClaims (mode dra): ``results`` is the
    node's entry of claim_results_by_pool."""
    index = GpuIndex(node_plan)
    out = []
    for meta, status, result in results or []:
        gpu = index.dra(result.get("device"))
        for reserved in status.get("reservedFor") or []:
            if reserved.get("resource") not in (None, "pods"):
                continue
            pod = pods_by_name.get((meta.get("namespace"), reserved.get("name")))
            if pod is not None and not _active(pod):
                continue
            out.append(
                {
                    "namespace": meta.get("namespace"),
                    "pod": reserved.get("name"),
                    "uid": reserved.get("uid"),
                    "owner": _owner(pod),
                    "container": None,
                    "resource_name": None,
                    "claim": meta.get("name"),
                    "device_id": result.get("device"),
                    "gpu": gpu["uuid"] if gpu else None,
                    "index": gpu["index"] if gpu else None,
                    "via": "ResourceClaim",
                }
            )
    return out


def _gpu_processes(facts, uuid):
    """The processes on GPU ``uuid`` in a host's GPU facts (nvidia_gpus: the list of GPUs)."""
    gpus = facts.get("gpus") if isinstance(facts, dict) else facts
    for gpu in gpus or []:
        if normalize_uuid(gpu.get("uuid") or "") == normalize_uuid(uuid or ""):
            return gpu.get("processes") or []
    return []


# ---------------------------------------------------------------------------------------------
# the diff


def node_diff(
    node_plan, live, pod_resources=None, pods_by_name=None, claimed=None, facts=None, services=None
):
    """What changes on one node and who is in the way (see resplit_diff); ``claimed``: the node's
    entry of claim_results_by_pool."""
    pods_by_name = pods_by_name or {}
    after = _kubernetes_uuids(node_plan)
    before = (live or {}).get("kubernetes")
    gpus = {g["uuid"]: g for g in node_plan.get("gpus") or []}

    def ref(uuid):
        g = gpus.get(uuid) or {}
        return {"uuid": uuid, "index": g.get("index"), "share": g.get("share")}

    if before is None:
        to_host, to_kubernetes = [], []
    else:
        to_host = [ref(u) for u in before if u not in after]
        to_kubernetes = [ref(u) for u in after if u not in before]
    holders = device_plugin_holders(node_plan, pod_resources, pods_by_name)
    holders += claim_holders(node_plan, claimed, pods_by_name)
    # a pod in the way: holds a GPU that leaves the Kubernetes share in this change; with no live split to
    # compare with, every held GPU outside the new share. A claim on a GPU that was outside the share
    # already (a diagnostic claim tolerating the host-share taint) is not this change's business. Through
    # the device plugin, a pod holding a GPU of the host share is always in the way: the kubelet keeps a
    # device the plugin stopped advertising (k8s-device-plugin#313), e.g. after a run that re-applied the
    # plugin and then stopped before the host side
    host_share = {g["uuid"] for g in node_plan.get("gpus") or [] if g.get("share") == SHARE_HOST}
    in_the_way = [
        h
        for h in holders
        if h["gpu"] not in after
        and (before is None or h["gpu"] in before or (h["via"] == "device plugin" and h["gpu"] in host_share))
    ]
    sharing = _sharing_change(node_plan, live)
    if sharing:
        # the plugin registers its devices under other ids (<uuid>::<n> or <uuid>): every device-plugin
        # holder of the node keeps an id the plugin no longer has
        in_the_way = [h for h in holders if h["gpu"] is not None]
    mig = mig_geometry_changes(node_plan)
    changing = {c["uuid"] for c in mig}
    # a GPU whose MIG geometry changes loses every device the plugin registered for it (whole GPU or MIG)
    in_the_way += [h for h in holders if h["gpu"] in changing and h not in in_the_way]
    held = {h["gpu"] for h in in_the_way if h["gpu"] not in changing or h["gpu"] not in after}
    if before is None:
        # no live split to compare with: every held GPU that leaves the Kubernetes share moves
        to_host = [ref(u) for u in sorted(held, key=lambda u: (gpus.get(u) or {}).get("index", 0)) if u]
    warnings = []
    held_uuids = {normalize_uuid(h["gpu"] or "") for h in holders}
    for move in to_host:
        for proc in _gpu_processes(facts, move["uuid"]):
            if proc.get("in_container") and normalize_uuid(move["uuid"]) not in held_uuids:
                warnings.append(
                    f"{node_plan['node']}: GPU {move['index']} ({move['uuid']}) runs container process "
                    f"{proc.get('pid')} ({proc.get('name')}) that no pod is known to hold: a container "
                    "outside Kubernetes, or a pod the kubelet no longer reports; stop it before the GPU "
                    "goes to the host"
                )
    host_processes = []
    for move in to_kubernetes:
        for proc in _gpu_processes(facts, move["uuid"]):
            if not proc.get("in_container"):
                host_processes.append(
                    {
                        "gpu": move["uuid"],
                        "index": move["index"],
                        "pid": proc.get("pid"),
                        "name": proc.get("name"),
                    }
                )
    available = (pod_resources or {}).get("available")
    return {
        "node": node_plan["node"],
        "host": node_plan.get("host"),
        "mode": node_plan.get("mode"),
        "before_source": (live or {}).get("source"),
        "kubernetes_before": before,
        "kubernetes_after": after,
        "to_host": to_host,
        "to_kubernetes": to_kubernetes,
        "sharing": sharing,
        "mig": mig,
        "holders": in_the_way,
        "host_processes": host_processes,
        "host_services": list(services or []),
        "pod_resources": "read"
        if available
        else ("not read" if pod_resources is None else "no kubelet socket"),
        "warnings": warnings,
    }


def resplit_diff(
    plan,
    pod_resources=None,
    daemonsets=None,
    taint_rules=None,
    pods=None,
    claims=None,
    facts=None,
    services=None,
    unread=None,
):
    """Per node of the plan: the GPUs that move each way and the pods in the way.

    ``pod_resources``: {host: gpu_pod_resources result}; ``daemonsets``: the live split DaemonSets;
    ``taint_rules``: gpusplit's live host-share DeviceTaintRules; ``pods``: the live pods (owners,
    phases); ``claims``: the live ResourceClaims; ``facts``: {host: nvidia_gpus}; ``services``:
    {host: gpusplit_host_services}; ``unread``: {host: why its pod resources were not read}. Returns
    {"nodes": [...] (only nodes where something moves or someone is in the way), "unchanged": [node
    names], "holders": every pod in the way once ({namespace, name, uid}: what module pod_eviction
    takes), "unread": [{node, host, reason}] (nodes whose pod resources were not read where a GPU may
    leave the Kubernetes share: who holds it is unknown), "warnings": [...]}.
    """
    nodes = _mapping(_mapping(plan, "plan").get("nodes"), "plan.nodes")
    pod_resources = _mapping(pod_resources, "pod_resources")
    facts = _mapping(facts, "facts")
    services = _mapping(services, "services")
    unread = _mapping(unread, "unread")
    shares = live_shares(plan, daemonsets, taint_rules)
    by_name = _pods_by_name(pods)
    claimed = claim_results_by_pool(claims)
    out = {"nodes": [], "unchanged": [], "holders": [], "unread": [], "warnings": []}
    seen = set()
    for host in sorted(nodes):
        node_plan = nodes[host]
        diff = node_diff(
            node_plan,
            shares.get(node_plan["node"]),
            pod_resources.get(host),
            by_name,
            claimed.get(node_plan["node"]),
            facts.get(host),
            services.get(host),
        )
        out["warnings"].extend(diff["warnings"])
        if host in unread and _may_leave(node_plan, diff):
            out["unread"].append({"node": diff["node"], "host": host, "reason": unread[host]})
        if (
            diff["to_host"]
            or diff["to_kubernetes"]
            or diff["sharing"]
            or diff["mig"]
            or diff["holders"]
            or diff["host_processes"]
        ):
            out["nodes"].append(diff)
        else:
            out["unchanged"].append(diff["node"])
        for h in diff["holders"]:
            key = (h["namespace"], h["pod"])
            if key not in seen:
                seen.add(key)
                out["holders"].append({"namespace": h["namespace"], "name": h["pod"], "uid": h["uid"]})
    return out


def _sharing_change(node_plan, live):
    """{before, after} when the node's live split DaemonSet shares its GPUs otherwise than the plan, else None
    (no split DaemonSet yet: nothing was shared by gpusplit)."""
    before = (live or {}).get("sharing")
    after = sharing_text(node_plan.get("sharing"))
    if before is None or before == after:
        return None
    return {"before": before, "after": after}


def mig_geometry_changes(node_plan):
    """The GPUs of ``node_plan`` whose MIG geometry this run changes (the plan's ``mig_changes``: mode
    device_plugin, gpusplit_mig_geometry differing from the facts), each {uuid, index, now, want}."""
    return [dict(c) for c in _list(node_plan.get("mig_changes"), "plan.mig_changes")]


def _mig_text(change):
    now = "MIG disabled" if change["now"] is None else f"[{', '.join(change['now'])}]"
    return f"GPU {change['index']} ({change['uuid']}): {now} -> [{', '.join(change['want'])}]"


def _may_leave(node_plan, diff):
    """Whether a GPU may leave the node's Kubernetes share in this change (or lose its devices): one moves to
    the host, the sharing or a GPU's MIG geometry changes, or there is no live split to compare with and the
    plan keeps some GPU out of the share."""
    if diff["to_host"] or diff.get("sharing") or diff.get("mig"):
        return True
    gpus = node_plan.get("gpus") or []
    return diff["kubernetes_before"] is None and len(diff["kubernetes_after"]) < len(gpus)


def _gpus_text(refs):
    return ", ".join(f"{r['index']} ({r['uuid']})" for r in refs) or "-"


def resplit_table(diff):
    """The diff as lines of text: one block per node that changes."""
    diff = _mapping(diff, "diff")
    lines = []
    for node in diff.get("nodes") or []:
        before = node["kubernetes_before"]
        lines.append(
            f"{node['node']} (mode {node['mode']}): Kubernetes share "
            f"{'unknown (' + node['before_source'] + ')' if before is None else len(before)} -> "
            f"{len(node['kubernetes_after'])}; pod-resources {node['pod_resources']}"
        )
        lines.append(f"  to the host:      {_gpus_text(node['to_host'])}")
        lines.append(f"  to Kubernetes:    {_gpus_text(node['to_kubernetes'])}")
        if node.get("sharing"):
            lines.append(f"  sharing:          {node['sharing']['before']} -> {node['sharing']['after']}")
        for change in node.get("mig") or []:
            lines.append(f"  MIG geometry:     {_mig_text(change)}")
        for h in node["holders"]:
            owner = f", owner {h['owner']}" if h.get("owner") else ""
            via = f"claim {h['claim']}" if h.get("claim") else f"{h['resource_name']} {h['device_id']}"
            lines.append(
                f"  held: GPU {h['index']} ({h['gpu']}) by pod {h['namespace']}/{h['pod']}{owner} ({via})"
            )
        for p in node["host_processes"]:
            lines.append(f"  host process on GPU {p['index']} ({p['gpu']}): pid {p['pid']} {p['name']}")
        if node["to_kubernetes"] and node["host_services"]:
            lines.append(f"  host services pinned to the host share: {', '.join(node['host_services'])}")
    for u in diff.get("unread") or []:
        lines.append(f"{u['node']}: pod-resources not read, who holds its GPUs is unknown: {u['reason']}")
    if not lines:
        lines.append("no node's split changes, and no pod holds a GPU outside its node's Kubernetes share")
    elif diff.get("unchanged"):
        lines.append(f"unchanged: {len(diff['unchanged'])} node(s)")
    return "\n".join(lines + list(diff.get("warnings") or []))


def resplit_refusals(diff, policy="refuse", host_processes="refuse"):
    """The messages that stop the run before any change ([] when it may go on)."""
    check_policy(policy, host_processes)
    diff = _mapping(diff, "diff")
    errors = [
        f"{u['node']}: a GPU may leave the node's Kubernetes share, and the kubelet's pod resources of host "
        f"{u['host']} were not read, so who holds it is unknown: {u['reason']}. Nothing was changed."
        for u in diff.get("unread") or []
    ]
    for node in diff.get("nodes") or []:
        if policy == "refuse" and node["holders"]:
            pods = "; ".join(
                f"{h['namespace']}/{h['pod']} holds GPU {h['index']} ({h['gpu']})" for h in node["holders"]
            )
            if node.get("sharing"):
                why = (
                    f"The node's sharing changes ({node['sharing']['before']} -> {node['sharing']['after']}): its "
                    "device plugin registers the GPUs under other device ids"
                )
            elif node.get("mig"):
                why = (
                    f"The MIG geometry changes ({'; '.join(_mig_text(c) for c in node['mig'])}): nvidia-mig-parted "
                    "destroys the GPU's devices and makes new ones"
                )
            else:
                why = "These GPUs leave the node's Kubernetes share"
            errors.append(
                f"{node['node']}: {pods}. {why}, and the kubelet does not "
                "take a device back from a running pod. Set gpusplit_resplit_policy=evict (evicts exactly these "
                "pods, honouring PodDisruptionBudgets) or wait (no new pod gets these GPUs; waits for these pods "
                "to finish), or move the pods yourself, then run this again. Nothing was changed."
            )
        if host_processes == "refuse" and node["host_processes"]:
            procs = "; ".join(
                f"pid {p['pid']} ({p['name']}) on GPU {p['index']} ({p['gpu']})"
                for p in node["host_processes"]
            )
            services = (
                f" The host services pinned to the host share: {', '.join(node['host_services'])}."
                if node["host_services"]
                else ""
            )
            errors.append(
                f"{node['node']}: host process(es) run on GPUs that go to Kubernetes: {procs}.{services} Stop them "
                "(or re-pin them to the host's share), or set gpusplit_resplit_host_processes=ignore. "
                "Nothing was changed."
            )
    return errors


def still_holding(pods, diff):
    """The holders of the diff that are still there: same namespace, name and uid, not finished."""
    live = _pods_by_name(pods)
    out = []
    for holder in _mapping(diff, "diff").get("holders") or []:
        pod = live.get((holder["namespace"], holder["name"]))
        if pod is None or not _active(pod):
            continue
        if holder.get("uid") and ((pod.get("metadata") or {}).get("uid")) != holder["uid"]:
            continue  # a new pod of the same name (a StatefulSet's): not the holder
        out.append(holder)
    return out


def fence_nodes(diff):
    """Host names of the nodes where pods hold a GPU that leaves the Kubernetes share."""
    return sorted({n["host"] for n in _mapping(diff, "diff").get("nodes") or [] if n["holders"]})


def sub_plan(plan, hosts):
    """The plan restricted to ``hosts`` (the same shape)."""
    nodes = _mapping(_mapping(plan, "plan").get("nodes"), "plan.nodes")
    return {**plan, "nodes": {h: nodes[h] for h in _list(hosts, "hosts") if h in nodes}}


def fence_prune(plan, hosts):
    """The prune entry that removes the split DaemonSets of ``hosts`` the plan no longer renders."""
    nodes = sub_plan(plan, hosts)["nodes"]
    labels = sorted(label_value(n["node"]) for n in nodes.values())
    if not labels:
        return []
    return [
        {
            "api_version": "apps/v1",
            "kind": "DaemonSet",
            "label_selector": f"{PLUGIN_SELECTOR},{LABEL_NODE} in ({','.join(labels)})",
        }
    ]


def dra_fence_devices(diff, plan):
    """[{host, node, index, uuid, pci_bus_id}] of held GPUs that leave the share of a node in mode dra."""
    nodes = _mapping(_mapping(plan, "plan").get("nodes"), "plan.nodes")
    out = []
    for node in _mapping(diff, "diff").get("nodes") or []:
        node_plan = nodes.get(node["host"]) or {}
        mode = find_mode(node_plan.get("mode"))
        if mode is None or mode.kubernetes_share != SHARE_DRA:
            continue
        gpus = {g["uuid"]: g for g in node_plan.get("gpus") or []}
        for uuid in sorted({h["gpu"] for h in node["holders"] if h["gpu"]}):
            g = gpus.get(uuid) or {}
            out.append(
                {
                    "host": node["host"],
                    "node": node["node"],
                    "index": g.get("index"),
                    "uuid": uuid,
                    "pci_bus_id": g.get("pci_bus_id"),
                }
            )
    return out
