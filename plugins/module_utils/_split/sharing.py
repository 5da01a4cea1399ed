# Copyright: gpusplit contributors
# Apache-2.0
"""Sharing the Kubernetes share of a node: time-slicing through the split device plugin. Private to the collection.

A host's ``gpusplit_sharing`` says how the node's Kubernetes share is shared among pods; it never
touches the host share, because the split device plugin only sees the Kubernetes share's GPUs
(``NVIDIA_VISIBLE_DEVICES``). What the NVIDIA device plugin (v0.20.0, ``api/config/v1``) does with its
config file decides what is accepted here:

- ``sharing.timeSlicing.resources[].replicas`` must be 2 or more (the plugin refuses fewer); each
  device of a listed resource is advertised ``replicas`` times, as ``<id>::<n>``;
- the plugin resets ``rename`` and ``devices`` at start (``DisableResourceNamingInConfig``): the only
  renaming it honours is ``renameByDefault: true``, which advertises ``<resource>.shared``, and it
  always shares every device it sees;
- ``failRequestsGreaterThanOne: true`` makes the plugin fail a container that asks for more than one
  replica (the kubelet's admission error), instead of handing it replicas that may be of one GPU;
- ``sharing.mps`` needs NVIDIA's MPS control daemon, which runs privileged and so sees every GPU of
  the node, the host's too: refused on a split node.

Every problem is appended to ``errors`` (naming the host and the field); nothing is raised here.
"""

from __future__ import annotations

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import (
    GpusplitError,
    check_number,
    type_name,
    unknown_keys,
)

SHARED_SUFFIX = ".shared"  # the device plugin's DefaultSharedResourceNameSuffix
TIME_SLICING = "time-slicing"
STRATEGIES = ("time_slicing", "mps")
TIME_SLICING_KEYS = ("replicas", "rename", "fail_requests_greater_than_one")
MPS_KEYS = ("replicas",)
VAR = "gpusplit_sharing"
ANNOTATION_SHARING = "gpusplit.io/sharing"  # on a split DaemonSet and its pods: sharing_text of the node

MPS_REFUSAL = (
    "MPS is refused on a split node: NVIDIA's MPS control daemon runs privileged, and a privileged "
    "container sees every GPU of the node, the host share's too, so the host's GPUs would come under "
    "a daemon that Kubernetes runs; use time_slicing, or MIG, for the Kubernetes share"
)


def _bool(host, where, value, errors):
    if isinstance(value, bool):
        return value
    errors.append(f"{host}: {where}: expected true or false, got {type_name(value)}")
    return None


def read_sharing(host, raw, mode, errors):
    """The sharing of one host (``gpusplit_sharing``) checked against its mode, normalised:
    None (no sharing) or {"strategy": "time-slicing", "replicas", "rename", "fail_requests_greater_than_one"}.

    ``mode``: the host's entry of the mode table (modes.py), or None when the mode itself was refused.
    """
    if raw is None or raw == {}:
        return None
    if not isinstance(raw, dict):
        errors.append(f"{host}: {VAR}: expected a mapping with time_slicing or mps, got {type_name(raw)}")
        return None
    problems = unknown_keys(f"{host}: {VAR}", raw, STRATEGIES)
    chosen = [k for k in STRATEGIES if k in raw]
    if not problems and len(chosen) != 1:
        problems.append(f"{host}: {VAR}: set exactly one of time_slicing, mps (got {', '.join(chosen)})")
    if problems:
        errors.extend(problems)
        return None
    if mode is not None and not mode.split_plugin:
        errors.append(
            f"{host}: {VAR}: mode {mode.name} runs no split device plugin, which is what shares the Kubernetes "
            "share (modes device_plugin and gpu_operator); "
            + (
                "in mode dra, sharing is a claim's opaque config (docs/dra.md)"
                if mode.kubernetes_share == "dra"
                else "remove gpusplit_sharing or change gpusplit_mode"
            )
        )
        return None
    if "mps" in raw:
        errors.append(f"{host}: {VAR}.mps: {MPS_REFUSAL}")
        return None
    ts = raw["time_slicing"]
    where = f"{VAR}.time_slicing"
    if not isinstance(ts, dict):
        errors.append(f"{host}: {where}: expected a mapping with replicas, got {type_name(ts)}")
        return None
    before = len(errors)
    errors.extend(unknown_keys(f"{host}: {where}", ts, TIME_SLICING_KEYS))
    replicas = None
    if "replicas" not in ts:
        errors.append(f"{host}: {where}: replicas is required (how many pods share each GPU, 2 or more)")
    else:
        try:
            replicas = check_number(ts["replicas"], f"{host}: {where}.replicas", low=2, integer=True)
        except GpusplitError as exc:
            errors.extend(exc.errors)
    rename = ts.get("rename", False)
    if isinstance(rename, str):
        errors.append(
            f"{host}: {where}.rename: the device plugin ignores a resource name of one's own (it resets rename at "
            f"start); set rename: true to advertise nvidia.com/gpu{SHARED_SUFFIX} (renameByDefault), or false"
        )
        rename = None
    else:
        rename = _bool(host, f"{where}.rename", rename, errors)
    fail = _bool(
        host,
        f"{where}.fail_requests_greater_than_one",
        ts.get("fail_requests_greater_than_one", False),
        errors,
    )
    if len(errors) != before:
        return None
    return {
        "strategy": TIME_SLICING,
        "replicas": replicas,
        "rename": rename,
        "fail_requests_greater_than_one": fail,
    }


def device_of_replica(device_id):
    """The device a replica's id names: the device plugin advertises each shared device as ``<id>::<n>``."""
    head, sep, tail = device_id.rpartition("::")
    return head if sep and tail.isdigit() and tail.isascii() else device_id


def shared_name(resource, sharing):
    """The name the device plugin advertises ``resource`` under with ``sharing``."""
    return resource + SHARED_SUFFIX if sharing and sharing.get("rename") else resource


def apply_to_plan(plan, sharing):
    """Record ``sharing`` in the node plan: ``plan["sharing"]`` (with the devices each shared resource
    has, and what it is advertised as) and ``plan["resources"]`` as the plugin advertises them (every
    device ``replicas`` times, under the shared name). No sharing: ``plan["sharing"]`` is None."""
    plan["sharing"] = None
    if not sharing or not plan.get("kubernetes_uuids"):
        return plan
    devices = {k: v for k, v in plan["resources"].items() if v}
    if not devices:
        return plan
    advertised = {k: v for k, v in plan["resources"].items() if k not in devices}
    shared = []
    for name, count in sorted(devices.items()):
        as_name = shared_name(name, sharing)
        advertised[as_name] = advertised.get(as_name, 0) + count * sharing["replicas"]
        if as_name != name:
            advertised.setdefault(name, 0)
        shared.append({"name": name, "devices": count, "advertised_as": as_name})
    plan["resources"] = {k: advertised[k] for k in sorted(advertised)}
    plan["sharing"] = dict(sharing, resources=shared)
    if isinstance(plan.get("resource_name"), list):
        plan["resource_name"] = [k for k, v in plan["resources"].items() if v]
    elif sharing.get("rename"):
        plan["resource_name"] = shared_name(plan["resource_name"], sharing)
    return plan


def sharing_text(sharing):
    """One line for a node's sharing: ``time-slicing x4 (nvidia.com/gpu.shared, failRequestsGreaterThanOne)``,
    ``none`` without."""
    if not sharing:
        return "none"
    extra = [r["advertised_as"] for r in sharing.get("resources") or [] if r["advertised_as"] != r["name"]]
    if sharing.get("fail_requests_greater_than_one"):
        extra.append("failRequestsGreaterThanOne")
    return f"{sharing['strategy']} x{sharing['replicas']}" + (f" ({', '.join(extra)})" if extra else "")


def pod_sharing(pod):
    """The sharing a split device-plugin pod runs with, from its ``gpusplit.io/sharing`` annotation (the text
    of :func:`sharing_text`); a pod without it shares nothing."""
    annotations = ((pod or {}).get("metadata") or {}).get("annotations") or {}
    return annotations.get(ANNOTATION_SHARING) or sharing_text(None)


def advertised_difference(node_plan, advertised):
    """Why a shared node advertises other numbers than planned, in words (None when it does not, or the
    node shares nothing): the plan's replicas per GPU against what the node shows."""
    sharing = node_plan.get("sharing")
    if not sharing or advertised is None:
        return None
    parts = []
    for r in sharing.get("resources") or []:
        want = r["devices"] * sharing["replicas"]
        got = advertised.get(r["advertised_as"], 0)
        if got == want:
            continue
        unshared = advertised.get(r["name"], 0) if r["advertised_as"] != r["name"] else None
        if got == r["devices"] or unshared == r["devices"]:
            why = "one per device: the split plugin runs without its sharing config"
        elif got and got % r["devices"] == 0:
            why = f"{got // r['devices']} replicas per device: the split plugin runs an older sharing config"
        else:
            why = "the split plugin has not registered the shared devices"
        parts.append(
            f"{r['advertised_as']}: {got} advertised, {want} planned ({r['devices']} device(s) x "
            f"{sharing['replicas']} replicas); {why}"
        )
    return "; ".join(parts) or None
