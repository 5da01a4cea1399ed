# Copyright: gpusplit contributors
# Apache-2.0
"""Sharing the Kubernetes share of a node: time-slicing through the split device plugin, or through the
NVIDIA DRA driver's opaque config in mode dra. Private to the collection.

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

In mode dra the driver (dra-driver-nvidia-gpu at the pinned chart version, ``api/nvidia.com/resource/v1beta1``)
takes sharing as a ``GpuConfig``: ``sharing.strategy: TimeSlicing`` with ``timeSlicingConfig.interval`` (Default,
Short, Medium or Long), accepted only with its ``TimeSlicingSettings`` feature gate. Pods share a GPU by sharing
one ResourceClaim, so replicas, rename and failRequestsGreaterThanOne mean nothing there and are refused; ``MPS``
needs the ``MPSSupport`` gate and is refused. gpusplit carries the config in a DeviceClass that selects only the
time-sliced nodes' Kubernetes GPUs by UUID (``dra_device_class_contexts``, which raises GpusplitError).

``read_sharing`` appends every problem to ``errors`` (naming the host and the field) and raises nothing.
"""

from __future__ import annotations

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import (
    GpusplitError,
    check_number,
    type_name,
    unknown_keys,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.names import (
    LABEL_MANAGED_BY,
    LABEL_NAME,
    MANAGED_BY,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._split.modes import SHARE_DRA

SHARED_SUFFIX = ".shared"  # the device plugin's DefaultSharedResourceNameSuffix
TIME_SLICING = "time-slicing"
STRATEGIES = ("time_slicing", "mps")
TIME_SLICING_KEYS = ("replicas", "rename", "fail_requests_greater_than_one")
MPS_KEYS = ("replicas",)
VAR = "gpusplit_sharing"
ANNOTATION_SHARING = "gpusplit.io/sharing"  # on a split DaemonSet and its pods: sharing_text of the node

# mode dra: the driver's GpuConfig (api/nvidia.com/resource/v1beta1: gpuconfig.go, sharing.go, validate.go)
DRA_DRIVER = "gpu.nvidia.com"  # the driver's name, as in _dra/names.py (which imports the planner)
DRA_CONFIG_API_VERSION = "resource.nvidia.com/v1beta1"
DRA_CONFIG_KIND = "GpuConfig"
DRA_STRATEGY = "TimeSlicing"
DRA_INTERVALS = ("Default", "Short", "Medium", "Long")  # TimeSliceInterval
DRA_TIME_SLICING_KEYS = ("interval",)
DRA_TIME_SLICING_GATE = "TimeSlicingSettings"
DRA_MPS_GATE = "MPSSupport"
DRA_CLASS_PREFIX = "gpusplit-time-slicing-"
DRA_CLASS_APP = "gpusplit-sharing"  # app.kubernetes.io/name of gpusplit's DeviceClasses: what a run prunes
DRA_CLASS_SELECTOR = f"{LABEL_MANAGED_BY}={MANAGED_BY},{LABEL_NAME}={DRA_CLASS_APP}"
# resource.k8s.io: a DeviceClass selector's CEL expression is at most 10 KiB (CELSelectorExpressionMaxLength)
CEL_EXPRESSION_MAX = 10 * 1024

DRA_MPS_REFUSAL = (
    "MPS through the NVIDIA DRA driver needs the driver's MPSSupport feature gate (alpha, off by default; "
    "the chart's featureGates value, gpusplit_dra_driver_settings.feature_gates), and gpusplit does not "
    "manage the MPS control daemon the driver then starts per claim; use time_slicing in mode dra, or set "
    "the GpuConfig with strategy MPS on your own claims"
)

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
    if mode is not None and mode.kubernetes_share == SHARE_DRA:
        return _read_dra(host, raw, errors)
    if mode is not None and not mode.split_plugin:
        errors.append(
            f"{host}: {VAR}: mode {mode.name} runs no split device plugin, which is what shares the Kubernetes "
            "share (modes device_plugin and gpu_operator, or dra); remove gpusplit_sharing or change gpusplit_mode"
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


def _read_dra(host, raw, errors):
    """``gpusplit_sharing`` in mode dra: {"strategy": "time-slicing", "interval"} or None (refused)."""
    if "mps" in raw:
        errors.append(f"{host}: {VAR}.mps: {DRA_MPS_REFUSAL}")
        return None
    ts = raw["time_slicing"]
    where = f"{host}: {VAR}.time_slicing"
    if ts is None:
        ts = {}
    if not isinstance(ts, dict):
        errors.append(f"{where}: expected a mapping (interval, or nothing), got {type_name(ts)}")
        return None
    before = len(errors)
    moot = [k for k in TIME_SLICING_KEYS if k in ts]
    if moot:
        errors.append(
            f"{where}: {', '.join(moot)} {'has' if len(moot) == 1 else 'have'} no meaning in mode dra: the DRA "
            "driver shares a GPU among the pods "
            "that use one ResourceClaim, not by a replica count or a resource name; remove them (keys of mode "
            f"dra: {', '.join(DRA_TIME_SLICING_KEYS)})"
        )
    errors.extend(
        unknown_keys(
            where, {k: v for k, v in ts.items() if k not in TIME_SLICING_KEYS}, DRA_TIME_SLICING_KEYS
        )
    )
    interval = ts.get("interval", "Default")
    if interval not in DRA_INTERVALS:
        errors.append(
            f"{where}.interval: {interval!r} is not one of the DRA driver's time-slice intervals "
            f"{', '.join(DRA_INTERVALS)}"
        )
    if len(errors) != before:
        return None
    return {"strategy": TIME_SLICING, "interval": interval}


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
    if sharing and "interval" in sharing:
        return _apply_dra(plan, sharing)
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


def dra_class_name(interval):
    """The DeviceClass of the time-sliced GPUs with ``interval``: ``gpusplit-time-slicing-medium``."""
    return DRA_CLASS_PREFIX + interval.lower()


def _apply_dra(plan, sharing):
    """Mode dra: ``plan["dra_sharing"]`` (only on such a plan) names the whole Kubernetes GPUs the DeviceClass
    selects, None when there are none; the devices are counted as published (one each), so ``resources`` and
    ``sharing`` (the split plugin's) stay as planned."""
    by_uuid = {g["uuid"]: g for g in plan.get("gpus") or []}
    whole, mig = [], []
    for uuid in plan.get("kubernetes_uuids") or []:
        (mig if (by_uuid.get(uuid) or {}).get("mig_enabled") else whole).append(uuid)
    for uuid in mig:
        plan.setdefault("warnings", []).append(
            f"{VAR}: GPU {uuid} has MIG enabled: the DRA driver publishes its MIG devices, to which a GpuConfig "
            "does not apply, so it is not time-sliced"
        )
    plan["dra_sharing"] = (
        dict(sharing, device_class=dra_class_name(sharing["interval"]), uuids=whole) if whole else None
    )
    return plan


def _cel_string(text):
    """A CEL string literal of a GPU UUID (letters, digits and dashes; anything else is escaped)."""
    return "'" + str(text).replace("\\", "\\\\").replace("'", "\\'") + "'"


def dra_device_class_contexts(node_plans):
    """The contexts of templates/deviceclass.yaml.j2 for the time-sliced Kubernetes shares of ``node_plans`` (mode
    dra): one DeviceClass per interval, selecting whole GPUs of the driver by UUID and carrying the driver's
    GpuConfig as opaque config; sorted by name. Raises GpusplitError when a selector would be longer than the API
    server takes."""
    uuids = {}
    for p in node_plans:
        shared = p.get("dra_sharing")
        if shared:
            uuids.setdefault(shared["interval"], []).extend(shared["uuids"])
    out, errors = [], []
    for interval in sorted(uuids, key=DRA_INTERVALS.index):
        name = dra_class_name(interval)
        expression = (
            f"device.driver == '{DRA_DRIVER}' && device.attributes['{DRA_DRIVER}'].type == 'gpu' && "
            f"device.attributes['{DRA_DRIVER}'].uuid in [{', '.join(_cel_string(u) for u in sorted(set(uuids[interval])))}]"
        )
        if len(expression) > CEL_EXPRESSION_MAX:
            errors.append(
                f"DeviceClass {name}: {len(set(uuids[interval]))} time-sliced GPUs need a selector of {len(expression)} "
                f"characters, more than the {CEL_EXPRESSION_MAX} the API server takes; give some nodes another "
                f"{VAR}.time_slicing.interval"
            )
        parameters = {
            "apiVersion": DRA_CONFIG_API_VERSION,
            "kind": DRA_CONFIG_KIND,
            "sharing": {"strategy": DRA_STRATEGY, "timeSlicingConfig": {"interval": interval}},
        }
        out.append(
            {
                "name": name,
                "expression": expression,
                "extended_resource_name": "",
                "labels": {LABEL_MANAGED_BY: MANAGED_BY, LABEL_NAME: DRA_CLASS_APP},
                "config": [{"driver": DRA_DRIVER, "parameters": parameters}],
            }
        )
    if errors:
        raise GpusplitError(errors)
    return out


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
