# Copyright: gpusplit contributors
# Apache-2.0
"""DRA mode: the NVIDIA DRA driver, the host share as DeviceTaintRules, faulty-GPU isolation.

Pure functions, no I/O (the playbooks gather the data; these decide):

- names and objects: one DeviceTaintRule per reserved device (``render_taint_rule``,
  ``host_share_rules``, ``isolation_rule``), the DeviceClass and the ResourceSlice the driver
  would publish (the lab harness), ResourceClaims/ResourceClaimTemplates with device
  tolerations (``render_claim``);
- the values for the dra-driver-nvidia-gpu Helm chart (``chart_values``);
- preflight checks over gathered data (``preflight``): resource.k8s.io/v1 served, Kubernetes
  >= 1.34.2, NVIDIA driver >= 565, CDI enabled in containerd, no device plugin on a DRA node;
- the published ResourceSlices against the plan (``check_published``): a rule names a device
  by ``gpu-<minor>``, so the UUID the driver publishes under that name must be the planned one;
- the controller's ``EvictionInProgress`` condition of a rule (``parse_eviction_message``,
  ``rule_report``);
- isolation: which host/node/device a GPU UUID is (``locate_gpu``), and the planner input with
  that GPU marked lost so that the existing planner leaves it out (``isolation_fleet_input``).

The NVIDIA DRA driver cannot be told to leave GPUs out: it publishes every GPU of the node
as ``gpu-<minor>`` in the pool named after the node. A host share in DRA mode is therefore a
``NoSchedule`` DeviceTaintRule on each of its devices (docs/dra.md).
"""

from __future__ import annotations

import copy
import re

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError

try:  # Python 3.11+ (the controller); the host-side code never imports this module
    import tomllib
except ImportError:  # pragma: no cover
    tomllib = None

DRIVER = "gpu.nvidia.com"
DEVICE_CLASS = "gpu.nvidia.com"
# the selector of the chart's DeviceClass gpu.nvidia.com (whole GPUs, not MIG devices)
DEVICE_CLASS_SELECTOR = (
    "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"
)
API_GROUP_VERSION = "resource.k8s.io/v1"
EFFECTS = ("None", "NoSchedule", "NoExecute")
TOLERATION_OPERATORS = ("Exists", "Equal")
MIN_KUBERNETES = (1, 34, 2)
MIN_DRIVER_MAJOR = 565
MIN_CONTAINERD = (1, 7)

# The same strings as in render.py (a unit test keeps them equal): this module does not import
# render.py at load time, so that the module device_taint_rule, which needs only the parsers,
# runs without Jinja2.
MANAGED_BY = "gpusplit"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_NAME = "app.kubernetes.io/name"
LABEL_NODE = "gpusplit.io/node"
LABEL_PURPOSE = "gpusplit.io/taint-purpose"
LABEL_MODE = "gpusplit.io/mode"
ANNOTATION_HOST = "gpusplit.io/host"
ANNOTATION_UUID = "gpusplit.io/gpu-uuid"
ANNOTATION_PCI = "gpusplit.io/pci-bus-id"
ANNOTATION_REASON = "gpusplit.io/reason"

# purpose -> (name prefix, app.kubernetes.io/name, taint key)
PURPOSES = {
    "host": ("gpusplit-host-", "gpusplit-host-share", "gpusplit.io/host-share"),
    "excluded": ("gpusplit-excluded-", "gpusplit-host-share", "gpusplit.io/excluded"),
    "isolate": ("gpusplit-isolate-", "gpusplit-isolate", "gpusplit.io/unhealthy"),
}
HOST_SHARE_TAINT_KEY = PURPOSES["host"][2]
EXCLUDED_TAINT_KEY = PURPOSES["excluded"][2]
ISOLATE_TAINT_KEY = PURPOSES["isolate"][2]
# the rules of the plan (host share and excluded GPUs): what dra_split prunes
PLAN_RULES_SELECTOR = f"{LABEL_MANAGED_BY}={MANAGED_BY},{LABEL_NAME}=gpusplit-host-share"
ISOLATION_RULES_SELECTOR = f"{LABEL_MANAGED_BY}={MANAGED_BY},{LABEL_NAME}=gpusplit-isolate"

CONDITION_TYPE = "EvictionInProgress"
DEVICE_PLUGIN_IMAGE_HINT = "k8s-device-plugin"
DEVICE_PLUGIN_LABELS = {LABEL_NAME: ("gpusplit-device-plugin", "nvidia-device-plugin")}

_QUALIFIED_NAME_RE = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
_VERSION_RE = re.compile(r"v?(\d+)\.(\d+)(?:\.(\d+))?")


class DraError(GpusplitError):
    """One or more refusals; ``errors`` holds every message."""


def _render(template, **context):
    # imported here so that a module using only the parsers does not need Jinja2 at run time
    from ansible_collections.gpusplit.k8s.plugins.plugin_utils.render import render_template

    return render_template(template, **context)


def _label_value(value):
    from ansible_collections.gpusplit.k8s.plugins.plugin_utils.render import label_value

    return label_value(value)


def _dns_label_name(prefix, name):
    from ansible_collections.gpusplit.k8s.plugins.plugin_utils.render import dns_label_name

    return dns_label_name(prefix, name)


# --------------------------------------------------------------------------------------------
# names


def device_name(minor):
    """The DRA driver's name of a full GPU: ``gpu-<minor>`` (the /dev/nvidiaN number, not the index)."""
    if isinstance(minor, bool) or not isinstance(minor, int | str) or not str(minor).strip().isdigit():
        raise DraError(f"minor number {minor!r} is not a whole number >= 0")
    return f"gpu-{int(str(minor).strip())}"


def taint_rule_name(purpose, node, device):
    """``gpusplit-<purpose>-<node>-<device>``: a DNS label (hashed when it would not fit).

    Deterministic, and one name per (purpose, node, device): ``device`` is always ``gpu-<n>``,
    so the node part is what remains when that suffix is taken off.
    """
    if purpose not in PURPOSES:
        raise DraError(f"taint purpose {purpose!r} is not one of {', '.join(PURPOSES)}")
    return _dns_label_name(PURPOSES[purpose][0], f"{node}-{device}")


# --------------------------------------------------------------------------------------------
# DeviceTaintRules


def _check_effect(effect):
    if effect not in EFFECTS:
        raise DraError(f"taint effect {effect!r} is not one of {', '.join(EFFECTS)}")


def render_taint_rule(
    purpose,
    node,
    device,
    effect="NoSchedule",
    value=None,
    host=None,
    uuid=None,
    pci_bus_id=None,
    reason=None,
    driver=DRIVER,
):
    """One DeviceTaintRule naming ``driver``/``pool=node``/``device``, with gpusplit's labels."""
    _check_effect(effect)
    if purpose not in PURPOSES:
        raise DraError(f"taint purpose {purpose!r} is not one of {', '.join(PURPOSES)}")
    _, app_name, key = PURPOSES[purpose]
    labels = {
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_NAME: app_name,
        LABEL_PURPOSE: purpose,
        LABEL_NODE: _label_value(node),
    }
    annotations = {}
    if host:
        annotations[ANNOTATION_HOST] = str(host)
    if uuid:
        annotations[ANNOTATION_UUID] = str(uuid)
    if pci_bus_id:
        annotations[ANNOTATION_PCI] = str(pci_bus_id)
    if reason:
        annotations[ANNOTATION_REASON] = str(reason)
    return _render(
        "devicetaintrule.yaml.j2",
        name=taint_rule_name(purpose, node, device),
        labels=labels,
        annotations=annotations,
        driver=driver,
        pool=str(node),
        device=str(device),
        key=key,
        value=_label_value(value) if value else "",
        effect=effect,
    )


def _node_plans(plan):
    from ansible_collections.gpusplit.k8s.plugins.module_utils._split.planner import node_plans

    return node_plans(plan)


def dra_node_plans(plan):
    """The node plans in mode dra."""
    return [p for p in _node_plans(plan) if p.get("mode") == "dra"]


def host_share_rules(plan, effect="NoSchedule", slices=None):
    """One DeviceTaintRule per reserved device of every node in mode dra, sorted by name.

    Reserved = the host share (purpose ``host``, key gpusplit.io/host-share) and the GPUs the
    planner excluded as unhealthy (purpose ``excluded``, key gpusplit.io/excluded): the driver
    publishes those too, and no claim should get them. A lost GPU without a minor number
    cannot be named (the planner warned); it is skipped.

    A MIG-enabled reserved GPU is published as its MIG devices, whose names carry the GPU
    instance profile and placement that the facts do not have: with ``slices`` (the live
    ResourceSlices) every published device whose ``parentUUID`` is that GPU gets its own rule
    as well. Its ``gpu-<minor>`` rule is kept (it holds if MIG is turned off again).
    """
    published = published_devices(slices) if slices is not None else {}
    rules = []
    errors = []
    for node_plan in dra_node_plans(plan):
        host, node = node_plan["host"], node_plan["node"]
        planned = {
            "host": set(node_plan.get("dra_devices") or []),
            "excluded": set(node_plan.get("dra_excluded_devices") or []),
        }
        reasons = {e.get("uuid"): e.get("reason") for e in node_plan.get("excluded") or []}
        seen = {"host": set(), "excluded": set()}
        for gpu in node_plan.get("gpus") or []:
            share = gpu.get("share")
            if share not in ("host", "excluded") or gpu.get("minor_number") is None:
                continue
            device = device_name(gpu["minor_number"])
            seen[share].add(device)
            if share == "host":
                value, reason = "reserved", "kept for the host by the split plan"
            else:
                value = gpu.get("health") or "excluded"
                reason = reasons.get(gpu.get("uuid")) or f"health {value}"
            devices = [device]
            if gpu.get("mig_enabled"):
                devices += published_mig_devices(published, node, gpu.get("uuid"))
            for name in devices:
                rules.append(
                    render_taint_rule(
                        share,
                        node,
                        name,
                        effect=effect,
                        value=value,
                        host=host,
                        uuid=gpu.get("uuid"),
                        pci_bus_id=gpu.get("pci_bus_id"),
                        reason=reason if name == device else f"{reason} (a MIG device of this GPU)",
                    )
                )
        for share in ("host", "excluded"):
            if seen[share] != planned[share]:
                errors.append(
                    f"{host}: the plan lists {share} devices {sorted(planned[share])} but its GPUs give "
                    f"{sorted(seen[share])}; re-run the planner"
                )
    names = {}
    for rule in rules:
        name = rule["metadata"]["name"]
        if name in names:
            errors.append(f"DeviceTaintRule name {name} is rendered twice ({names[name]})")
        names[name] = rule["spec"]["deviceSelector"]["pool"]
    if errors:
        raise DraError(errors)
    return sorted(rules, key=lambda r: r["metadata"]["name"])


def isolation_rule(located, effect="None", reason=None, device=None):
    """The DeviceTaintRule isolating one GPU (see ``locate_gpu``); effect None reports only.

    ``device`` names another published device of that GPU (one of its MIG devices).
    """
    if located.get("minor_number") is None:
        raise DraError(
            f"{located.get('host')}: GPU {located.get('uuid')} has no minor number, "
            "so its DRA device name gpu-<minor> is unknown"
        )
    reason = reason or "isolated"
    return render_taint_rule(
        "isolate",
        located["node"],
        device or device_name(located["minor_number"]),
        effect=effect,
        value=reason,
        host=located.get("host"),
        uuid=located.get("uuid"),
        pci_bus_id=located.get("pci_bus_id"),
        reason=reason,
    )


def rules_of_gpu(rules, uuid, purpose="isolate"):
    """The names of the live gpusplit DeviceTaintRules of ``purpose`` that name GPU ``uuid`` (annotation)."""
    if purpose not in PURPOSES:
        raise DraError(f"taint purpose {purpose!r} is not one of {', '.join(PURPOSES)}")
    want = _norm_uuid(uuid)
    names = []
    for rule in rules or []:
        meta = rule.get("metadata") or {}
        labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
        if labels.get(LABEL_MANAGED_BY) != MANAGED_BY or labels.get(LABEL_PURPOSE) != purpose:
            continue
        if _norm_uuid(annotations.get(ANNOTATION_UUID)) == want and want:
            names.append(meta.get("name"))
    return sorted(names)


def isolation_rules(located, effect="None", reason=None, slices=None):
    """Every DeviceTaintRule that isolates one GPU: its ``gpu-<minor>`` device, and for a MIG-enabled
    GPU each MIG device the driver publishes for it (``slices``: the node's live ResourceSlices).

    Refuses a MIG-enabled GPU none of whose MIG devices is published: a rule on ``gpu-<minor>``
    alone would select nothing, and the controller would report 0 devices. A lost GPU gets no
    rule (empty list): the driver does not publish it, so no claim can be given it.
    """
    if located.get("health") == "lost":
        return []
    rules = [isolation_rule(located, effect, reason)]
    if located.get("mig_enabled"):
        migs = published_mig_devices(published_devices(slices), located["node"], located.get("uuid"))
        if not migs:
            raise DraError(
                f"{located.get('host')}: GPU {located.get('uuid')} has MIG enabled, and node {located['node']} "
                "publishes none of its MIG devices (is the DRA driver running there?); nothing was changed"
            )
        rules += [isolation_rule(located, effect, reason, device=m) for m in migs]
    return rules


def rules_table(rules):
    """NODE  DEVICE  EFFECT  KEY=VALUE  GPU: one line per rule."""
    header = ("NODE", "DEVICE", "EFFECT", "TAINT", "GPU")
    rows = []
    for rule in rules:
        sel = rule["spec"]["deviceSelector"]
        taint = rule["spec"]["taint"]
        ann = rule["metadata"].get("annotations") or {}
        taint_text = taint["key"] + (f"={taint['value']}" if taint.get("value") else "")
        rows.append((sel["pool"], sel["device"], taint["effect"], taint_text, ann.get(ANNOTATION_UUID, "?")))
    if not rows:
        return "no DeviceTaintRule: no reserved GPU on a node in mode dra"
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in [header, *rows]
    ]
    lines.append(f"{len(rows)} DeviceTaintRule(s)")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# DeviceClass, ResourceSlice (lab harness), claims and tolerations


def render_device_class(
    name=DEVICE_CLASS, expression=DEVICE_CLASS_SELECTOR, extended_resource_name=None, labels=None
):
    """The DeviceClass of whole NVIDIA GPUs, as the chart installs it."""
    return _render(
        "deviceclass.yaml.j2",
        name=name,
        expression=expression,
        extended_resource_name=extended_resource_name or "",
        labels=dict(labels or {}),
    )


def dra_pci_bus_id(value):
    """NVML ``00000000:1B:00.0`` -> ``0000:1b:00.0`` (the extended BDF form of resource.kubernetes.io/pciBusID)."""
    from ansible_collections.gpusplit.k8s.plugins.module_utils._gpu.ids import normalize_pci_bus_id

    canonical = normalize_pci_bus_id(value)
    if canonical is None:
        return None
    domain, rest = canonical.split(":", 1)
    return f"{int(domain, 16):04x}:{rest.lower()}"


def semver(text):
    """``570.172.08`` -> ``570.172.8``: a version attribute must be strict semver (no leading zeros)."""
    version = parse_version(text) if text else None
    return _fmt_version(version) if version else None


# LAB HARNESS ONLY: GPU instance profile ids and memory-slice sizes of an A100 80GB, as
# `nvidia-smi mig -lgip` lists them (NVIDIA MIG user guide, "A100 MIG profiles"); the harness
# needs them to name MIG devices the way the driver does. gpusplit itself never predicts MIG
# device names: it reads them from the published ResourceSlices (parentUUID attribute).
_LAB_MIG_PROFILES = {
    "1g.10gb": (19, 1),
    "1g.10gb+me": (20, 1),
    "1g.20gb": (15, 2),
    "2g.20gb": (14, 2),
    "3g.40gb": (9, 4),
    "4g.40gb": (5, 4),
    "7g.80gb": (0, 8),
}
_LAB_MIG_PROFILE_FALLBACK = (99, 1)


def lab_mig_device_name(parent_minor, profile, profile_id, placement_start):
    """The DRA driver's MIG device name: ``gpu-<parent minor>-mig-<profile without dots>-<profile id>-<start>``.

    (kubernetes-sigs/dra-driver-nvidia-gpu, cmd/gpu-kubelet-plugin/mig.go, ToCanonicalName.)
    """
    pname = re.sub(r"[^a-z0-9-]", "-", str(profile).replace(".", "").lower()).strip("-")
    return f"gpu-{int(parent_minor)}-mig-{pname}-{int(profile_id)}-{int(placement_start)}"


def _published_device(name, kind, uuid, gpu, memory, driver_version, **extra):
    """One device as the harness publishes it: the parent GPU's product name and bus id."""
    return {
        "name": name,
        "type": kind,
        "uuid": uuid,
        "product_name": gpu.get("name") or "",
        "pci_bus_id": dra_pci_bus_id(gpu.get("pci_bus_id")),
        "memory": f"{int(memory)}Mi" if isinstance(memory, int) and not isinstance(memory, bool) else "",
        "driver_version": driver_version or "",
        **extra,
    }


def _lab_mig_devices(gpu, driver_version):
    devices, start = [], 0
    for mig in sorted(gpu.get("mig_devices") or [], key=lambda m: m.get("gpu_instance_id") or 0):
        profile_id, size = _LAB_MIG_PROFILES.get(str(mig.get("profile")), _LAB_MIG_PROFILE_FALLBACK)
        name = lab_mig_device_name(gpu["minor_number"], mig.get("profile") or "mig", profile_id, start)
        devices.append(
            _published_device(
                name,
                "mig",
                mig.get("uuid") or "",
                gpu,
                mig.get("memory_total_mib"),
                driver_version,
                parent_uuid=gpu["uuid"],
                profile=str(mig.get("profile") or ""),
            )
        )
        start += size
    return devices


def slice_devices(gpus, driver_version=None):
    """The devices the driver would publish for these GPU facts (LAB HARNESS ONLY).

    Lost GPUs are not published; a MIG-enabled GPU is published as its MIG devices (type ``mig``,
    with ``parentUUID``, ``profile`` and the MIG ``uuid``), not as ``gpu-<minor>``.
    """
    devices = []
    driver_version = semver(driver_version)
    for gpu in gpus or []:
        if gpu.get("lost") or (gpu.get("health") or {}).get("status") == "lost":
            continue
        if gpu.get("minor_number") is None:
            continue
        if str((gpu.get("mig_mode") or {}).get("current") or "").lower() == "enabled":
            devices.extend(_lab_mig_devices(gpu, driver_version))
            continue
        name = device_name(gpu["minor_number"])
        devices.append(
            _published_device(name, "gpu", gpu["uuid"], gpu, gpu.get("memory_total_mib"), driver_version)
        )
    return sorted(devices, key=lambda d: (int(d["name"].split("-")[1]), d["name"]))


def render_resource_slice(node, gpus, generation=1, driver_version=None, labels=None):
    """LAB HARNESS ONLY: the ResourceSlice the driver would publish for ``node``."""
    name = f"{node}-{DRIVER}"
    if len(name) > 253:
        raise DraError(f"ResourceSlice name {name!r} is longer than 253 characters")
    return _render(
        "resourceslice.yaml.j2",
        name=name,
        node=str(node),
        driver=DRIVER,
        generation=int(generation),
        devices=slice_devices(gpus, driver_version),
        labels=dict(labels or {}),
    )


def toleration(key=None, operator=None, value=None, effect=None, toleration_seconds=None):
    """One DeviceToleration (resource.k8s.io/v1). No key + Exists tolerates every taint."""
    operator = operator or ("Equal" if value else "Exists")
    errors = []
    if operator not in TOLERATION_OPERATORS:
        errors.append(f"toleration operator {operator!r} is not one of {', '.join(TOLERATION_OPERATORS)}")
    if operator == "Exists" and value:
        errors.append("a toleration with operator Exists takes no value")
    if key is not None and not _QUALIFIED_NAME_RE.match(str(key)):
        errors.append(f"toleration key {key!r} is not a label name")
    if not key and operator != "Exists":
        errors.append("a toleration without key needs operator Exists")
    if effect is not None and effect not in EFFECTS:
        errors.append(f"toleration effect {effect!r} is not one of {', '.join(EFFECTS)}")
    if toleration_seconds is not None and (effect != "NoExecute" or not isinstance(toleration_seconds, int)):
        errors.append("toleration_seconds needs effect NoExecute and a whole number")
    if errors:
        raise DraError(errors)
    out = {"operator": operator}
    if key:
        out["key"] = str(key)
    if value:
        out["value"] = str(value)
    if effect:
        out["effect"] = effect
    if toleration_seconds is not None:
        out["tolerationSeconds"] = toleration_seconds
    return out


def host_share_toleration(effect="NoSchedule"):
    """Tolerate gpusplit's host-share taint (a diagnostic job that must reach a host GPU)."""
    return toleration(HOST_SHARE_TAINT_KEY, "Exists", effect=effect)


def isolation_toleration(effect=None):
    """Tolerate gpusplit's isolation taint (gpusplit.io/unhealthy), whatever its value.

    ``effect`` None tolerates every effect, NoExecute included, so that the diagnostic pod is
    neither kept off the device nor evicted from it. Operator Exists: the taint's value is the
    isolation reason turned into a label value, which a toleration should not have to repeat.
    """
    return toleration(ISOLATE_TAINT_KEY, "Exists", effect=effect)


def diagnostic_claim(name, namespace, located, kind="ResourceClaim"):
    """A claim for exactly the isolated GPU ``located`` (see locate_gpu), tolerating its isolation taint.

    It tolerates the planner's gpusplit.io/excluded taint too (dra.yml puts it on a GPU whose
    facts say it is unhealthy). The device is selected by its ``uuid`` attribute (CEL), so the claim can only get that GPU,
    and only on its node; the rest of the fleet's devices stay out of reach. For a burn-in or
    ``nvidia-smi -q`` job while the GPU is isolated.
    """
    uuid = str(located.get("uuid") or "")
    if not re.fullmatch(r"GPU-[0-9a-fA-F-]{36}", uuid):
        raise DraError(f"diagnostic claim: {uuid!r} is not a GPU UUID (GPU-...)")
    if located.get("mig_enabled"):
        raise DraError(
            f"diagnostic claim: GPU {uuid} has MIG enabled; the driver publishes its MIG devices, not the GPU "
            "(claim one of its MIG devices with DeviceClass mig.nvidia.com and a parentUUID selector)"
        )
    return render_claim(
        name,
        namespace,
        count=1,
        tolerations=[isolation_toleration(), toleration(EXCLUDED_TAINT_KEY, "Exists")],
        kind=kind,
        selectors=[f"device.attributes['{DRIVER}'].uuid == '{uuid}'"],
        labels={LABEL_MANAGED_BY: MANAGED_BY, LABEL_PURPOSE: "diagnose"},
    )


def render_claim(
    name,
    namespace,
    count=1,
    tolerations=(),
    device_class=DEVICE_CLASS,
    kind="ResourceClaimTemplate",
    request_name="gpu",
    selectors=(),
    labels=None,
):
    """A ResourceClaimTemplate (default) or ResourceClaim for ``count`` GPUs of ``device_class``.

    ``tolerations``: DeviceTolerations (see ``toleration``) for the request; ``selectors``:
    extra CEL expressions (e.g. ``device.attributes['gpu.nvidia.com'].productName == '...'``).
    """
    if kind not in ("ResourceClaimTemplate", "ResourceClaim"):
        raise DraError(f"kind {kind!r} is not ResourceClaimTemplate or ResourceClaim")
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise DraError(f"count {count!r} is not a whole number >= 1")
    checked = [_checked_toleration(t) for t in tolerations or ()]
    return _render(
        "resourceclaimtemplate.yaml.j2",
        kind=kind,
        name=name,
        namespace=namespace,
        labels=dict(labels or {}),
        request_name=request_name,
        device_class=device_class,
        count=count,
        selectors=list(selectors or ()),
        tolerations=checked,
    )


def _checked_toleration(t):
    """A toleration given in API spelling (tolerationSeconds) -> validated copy."""
    if not isinstance(t, dict):
        raise DraError(f"toleration {t!r} is not a mapping")
    unknown = sorted(set(t) - {"key", "operator", "value", "effect", "tolerationSeconds"})
    if unknown:
        raise DraError(f"toleration {t!r}: unknown key(s) {', '.join(unknown)}")
    return toleration(
        t.get("key"), t.get("operator"), t.get("value"), t.get("effect"), t.get("tolerationSeconds")
    )


# --------------------------------------------------------------------------------------------
# Helm chart values


DEFAULT_DRIVER_SETTINGS = {
    "driver_root": "/",  # nvidiaDriverRoot: / for a host-installed driver, /run/nvidia/driver under the operator
    "compute_domains": False,  # resources.computeDomains.enabled (needs webhook + cert-manager in 0.4.x)
    "feature_gates": {},  # featureGates
    "node_label": LABEL_MODE,  # the kubelet plugin runs only on nodes with <node_label>=<node_label_value>
    "node_label_value": "dra",
    "image_repository": None,  # image.repository
    "image_tag": None,  # image.tag
    "extra_values": {},  # merged last, as they are
}


def resolve_driver_settings(settings=None):
    settings = {} if settings is None else settings
    if not isinstance(settings, dict):
        raise DraError(f"DRA driver settings: expected a mapping, got {type(settings).__name__}")
    unknown = sorted(str(k) for k in settings if k not in DEFAULT_DRIVER_SETTINGS)
    if unknown:
        raise DraError(
            f"DRA driver settings: unknown key(s) {', '.join(unknown)} "
            f"(allowed: {', '.join(DEFAULT_DRIVER_SETTINGS)})"
        )
    out = dict(DEFAULT_DRIVER_SETTINGS)
    out.update({k: v for k, v in settings.items() if v is not None})
    errors = []
    if not isinstance(out["driver_root"], str) or not out["driver_root"].startswith("/"):
        errors.append(f"driver_root {out['driver_root']!r} is not an absolute path")
    if not isinstance(out["compute_domains"], bool):
        errors.append(f"compute_domains {out['compute_domains']!r} is not a boolean")
    gates = out["feature_gates"]
    if not isinstance(gates, dict) or not all(isinstance(v, bool) for v in gates.values()):
        errors.append(f"feature_gates {gates!r} is not a mapping of name -> true/false")
    if not isinstance(out["extra_values"], dict):
        errors.append(f"extra_values {out['extra_values']!r} is not a mapping")
    for key in ("node_label", "node_label_value"):
        if not isinstance(out[key], str) or not out[key]:
            errors.append(f"{key} {out[key]!r} is not a non-empty string")
    if errors:
        raise DraError(errors)
    return out


def deep_merge(base, override):
    """A copy of ``base`` with ``override`` merged in: mappings recursively, anything else replaced."""
    out = copy.deepcopy(base)
    for key, value in (override or {}).items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def chart_values(settings=None):
    """The values for the dra-driver-nvidia-gpu chart (0.4.x) on a gpusplit fleet.

    - ``resources.gpus.enabled: true`` with ``gpuResourcesEnabledOverride: true`` on purpose:
      the chart refuses GPUs without the override because the driver must not share a node with
      a device plugin; gpusplit guarantees that (preflight, and the DRA nodes get no split plugin).
    - ``resources.computeDomains.enabled: false`` by default: in chart 0.4.x compute domains need
      the webhook (and cert-manager); the chart refuses them otherwise.
    - the kubelet plugin runs only on nodes labelled ``gpusplit.io/mode=dra``: a nodeSelector,
      and a required nodeAffinity that replaces the chart's default terms (NFD / operator labels,
      which a fleet without NFD does not have).
    """
    s = resolve_driver_settings(settings)
    term = {
        "matchExpressions": [{"key": s["node_label"], "operator": "In", "values": [s["node_label_value"]]}]
    }
    values = {
        "nvidiaDriverRoot": s["driver_root"],
        "gpuResourcesEnabledOverride": True,
        "resources": {"gpus": {"enabled": True}, "computeDomains": {"enabled": s["compute_domains"]}},
        "kubeletPlugin": {
            "nodeSelector": {s["node_label"]: s["node_label_value"]},
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
                }
            },
        },
    }
    if s["feature_gates"]:
        values["featureGates"] = dict(sorted(s["feature_gates"].items()))
    image = {}
    if s["image_repository"]:
        image["repository"] = str(s["image_repository"])
    if s["image_tag"]:
        image["tag"] = str(s["image_tag"])
    if image:
        values["image"] = image
    return deep_merge(values, s["extra_values"])


def unknown_value_paths(values, reference, prefix=""):
    """Dotted paths in ``values`` that the chart's ``reference`` values do not have.

    A mapping that is empty in the reference (nodeSelector, featureGates, podAnnotations) is
    free-form: any key below it is accepted, as is anything below a list or scalar.
    """
    out = []
    for key, value in (values or {}).items():
        path = f"{prefix}{key}"
        if not isinstance(reference, dict) or key not in reference:
            out.append(path)
            continue
        ref = reference[key]
        if isinstance(value, dict) and isinstance(ref, dict) and ref:
            out.extend(unknown_value_paths(value, ref, path + "."))
    return out


# --------------------------------------------------------------------------------------------
# preflight


def parse_version(text):
    """``v1.34.2-eks-1`` / ``1.35.0+k3s1`` / ``570.172.08`` -> (major, minor, patch); None if unreadable."""
    if not isinstance(text, str):
        return None
    match = _VERSION_RE.search(text)
    if match is None:
        return None
    return (int(match.group(1)), int(match.group(2)), int(match.group(3) or 0))


def _fmt_version(v):
    return ".".join(str(x) for x in v)


def check_api(apis, need_taint_rules=False):
    """Errors when resource.k8s.io/v1 (and, if asked, its DeviceTaintRule) is not served."""
    errors = []
    served = (apis or {}).get(API_GROUP_VERSION)
    if not served:
        others = sorted(k for k in apis or {} if k.startswith("resource.k8s.io/"))
        errors.append(
            f"the API server does not serve {API_GROUP_VERSION} (DRA GA, Kubernetes >= 1.34); "
            f"it serves {', '.join(others) or 'no resource.k8s.io version'}"
        )
        return errors
    missing = [
        k
        for k in ("ResourceSlice", "DeviceClass", "ResourceClaim", "ResourceClaimTemplate")
        if k not in served
    ]
    if missing:
        errors.append(f"{API_GROUP_VERSION} lacks {', '.join(missing)}")
    if need_taint_rules and "DeviceTaintRule" not in served:
        others = sorted(
            k
            for k, kinds in (apis or {}).items()
            if k.startswith("resource.k8s.io/") and "DeviceTaintRule" in kinds
        )
        hint = (
            f" (served only as {', '.join(others)}; gpusplit writes {API_GROUP_VERSION}, GA in Kubernetes 1.37)"
            if others
            else " (GA in Kubernetes 1.37; on 1.36 it is beta and off: feature gate DRADeviceTaintRules and "
            "--runtime-config=resource.k8s.io/v1beta2=true)"
        )
        errors.append(f"the API server does not serve DeviceTaintRule in {API_GROUP_VERSION}{hint}")
    return errors


def check_kubernetes_version(git_version, minimum=MIN_KUBERNETES):
    version = parse_version(git_version)
    if version is None:
        return [f"cannot read the Kubernetes version {git_version!r}"]
    if version < tuple(minimum):
        return [
            f"Kubernetes {git_version} is older than {_fmt_version(minimum)}, which the NVIDIA DRA driver needs"
        ]
    return []


def check_driver_version(host, driver_version, minimum=MIN_DRIVER_MAJOR):
    if not driver_version:
        return [f"{host}: no NVIDIA driver version in the GPU facts (is the driver loaded?)"]
    version = parse_version(str(driver_version))
    if version is None:
        return [f"{host}: cannot read the NVIDIA driver version {driver_version!r}"]
    if version[0] < minimum:
        return [f"{host}: NVIDIA driver {driver_version} is older than {minimum}, which the DRA driver needs"]
    return []


def _toml(text, what):
    if tomllib is None:  # pragma: no cover
        raise DraError("reading containerd's config needs Python 3.11 (tomllib) on the controller")
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise DraError(f"{what} is not valid TOML: {exc}") from None


def containerd_imports(config_text, config_path="/etc/containerd/config.toml"):
    """The ``imports`` globs of a containerd config, absolute (relative ones are next to it)."""
    if not config_text:
        return []
    doc = _toml(config_text, config_path)
    imports = doc.get("imports") or []
    if isinstance(imports, str):
        imports = [imports]
    base = config_path.rsplit("/", 1)[0] or "/"
    return [i if i.startswith("/") else f"{base}/{i}" for i in imports if isinstance(i, str)]


_CRI_SECTIONS = (
    (
        "io.containerd.cri.v1.runtime",
        'plugins."io.containerd.cri.v1.runtime"',
    ),  # containerd 2.x (config version 3)
    ("io.containerd.grpc.v1.cri", 'plugins."io.containerd.grpc.v1.cri"'),  # containerd 1.7 (config version 2)
    ("cri", "plugins.cri"),  # config version 1
)


def containerd_cdi(
    config_text, containerd_version=None, imports=(), config_path="/etc/containerd/config.toml"
):
    """Whether containerd's CRI plugin has CDI on: {"enabled": True|False|None, "detail": str}.

    containerd 2.x: on unless ``enable_cdi = false``; 1.7: off unless ``enable_cdi = true`` in
    ``[plugins."io.containerd.grpc.v1.cri"]``; older: no CDI. ``config_text`` None = no config
    file (containerd's defaults). ``containerd_version``: the output of ``containerd --version``
    or a version; when unknown, config ``version = 3`` means containerd 2.x. ``imports``:
    [(path, text)] of the files the config imports, merged in order. None = cannot tell.
    """
    merged = {}
    sources = []
    if config_text is not None:
        merged = _toml(config_text, config_path)
        sources.append(config_path)
    for path, text in imports or ():
        merged = deep_merge(merged, _toml(text, path))
        sources.append(path)
    version = parse_version(containerd_version) if containerd_version else None
    if version is not None:
        major = "2.x" if version[0] >= 2 else "1.x"
        if version[:2] < MIN_CONTAINERD:
            return {
                "enabled": False,
                "detail": f"containerd {_fmt_version(version)} has no CDI support (needs >= 1.7; 2.x has it on)",
            }
    elif merged.get("version") == 3:
        major = "2.x"
    else:
        major = None
    plugins = merged.get("plugins") or {}
    explicit = None
    for key, spelled in _CRI_SECTIONS:
        section = plugins.get(key)
        if isinstance(section, dict) and isinstance(section.get("enable_cdi"), bool):
            explicit = (section["enable_cdi"], spelled)
            break
    where = ", ".join(sources) if sources else f"no {config_path} (containerd's defaults)"
    if explicit is not None:
        on, spelled = explicit
        state = "true" if on else "false"
        detail = f"enable_cdi = {state} in [{spelled}] ({where})"
        if not on:
            detail += "; set it to true (or remove it on containerd 2.x) and restart containerd"
        return {"enabled": on, "detail": detail}
    if major == "2.x":
        return {"enabled": True, "detail": f"containerd 2.x enables CDI by default ({where})"}
    if major == "1.x":
        return {
            "enabled": False,
            "detail": (
                f"containerd 1.7 has CDI off by default ({where}): add enable_cdi = true and "
                'cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"] under [plugins."io.containerd.grpc.v1.cri"] '
                "and restart containerd"
            ),
        }
    return {
        "enabled": None,
        "detail": (
            f"cannot tell whether CDI is on ({where}, containerd version unknown): containerd 2.x has it on, "
            "1.7 off by default; set gpusplit_containerd_version or enable_cdi explicitly"
        ),
    }


def _pod_is_device_plugin(pod):
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    for key, names in DEVICE_PLUGIN_LABELS.items():
        if labels.get(key) in names:
            return True
    spec = pod.get("spec") or {}
    containers = list(spec.get("containers") or []) + list(spec.get("initContainers") or [])
    return any(DEVICE_PLUGIN_IMAGE_HINT in (c.get("image") or "") for c in containers)


def device_plugin_pods(pods, nodes):
    """{node: [namespace/name]} of NVIDIA device-plugin pods (stock, gpusplit, operator) on ``nodes``."""
    wanted = set(nodes or [])
    out = {}
    for pod in pods or []:
        spec = pod.get("spec") or {}
        node = spec.get("nodeName")
        if node not in wanted or not _pod_is_device_plugin(pod):
            continue
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        meta = pod.get("metadata") or {}
        out.setdefault(node, []).append(f"{meta.get('namespace')}/{meta.get('name')}")
    return {k: sorted(v) for k, v in sorted(out.items())}


PREFLIGHT_CHECKS = (
    "api",
    "kubernetes_version",
    "device_taint_rules",
    "driver_version",
    "cdi",
    "device_plugin",
)


def preflight(cluster, hosts, pods=None, skip=(), need_taint_rules=True):
    """Every check the DRA driver and DRA-mode split need, over gathered data. Never raises.

    ``cluster``: {"git_version": str, "apis": {group/version: {Kind: ...}}} (k8s_cluster_info);
    ``hosts``: {host: {"node", "driver_version", "containerd": {"config_text", "config_path",
    "version", "imports": [{"path", "text"}]}}} for the hosts in mode dra; ``pods``: the live
    pods on those nodes; ``skip``: names from PREFLIGHT_CHECKS not to run (said in the report).
    Returns {"ok", "errors", "warnings", "checks": [{"check", "subject", "ok", "detail"}]}.
    """
    skip = set(skip or ())
    unknown = sorted(skip - set(PREFLIGHT_CHECKS))
    checks = []
    errors = []
    warnings = []
    if unknown:
        errors.append(
            f"preflight: unknown check(s) to skip: {', '.join(unknown)} (known: {', '.join(PREFLIGHT_CHECKS)})"
        )

    def record(name, subject, problems, ok_detail):
        if name in skip:
            checks.append({"check": name, "subject": subject, "ok": None, "detail": "skipped"})
            warnings.append(f"{subject}: preflight check {name} skipped")
            return
        checks.append(
            {
                "check": name,
                "subject": subject,
                "ok": not problems,
                "detail": "; ".join(problems) or ok_detail,
            }
        )
        errors.extend(problems)

    cluster = cluster or {}
    apis = cluster.get("apis") or {}
    git_version = cluster.get("git_version")
    record("api", "cluster", check_api(apis), f"{API_GROUP_VERSION} served")
    record(
        "kubernetes_version",
        "cluster",
        check_kubernetes_version(git_version),
        f"Kubernetes {git_version} >= {_fmt_version(MIN_KUBERNETES)}",
    )
    if need_taint_rules:
        taint_errors = check_api(apis, need_taint_rules=True) if (apis or {}).get(API_GROUP_VERSION) else []
        taint_errors = [e for e in taint_errors if "DeviceTaintRule" in e]
        record(
            "device_taint_rules", "cluster", taint_errors, f"DeviceTaintRule served in {API_GROUP_VERSION}"
        )
    nodes = {}
    for host in sorted(hosts or {}):
        info = hosts[host] or {}
        node = info.get("node") or host
        nodes[node] = host
        driver = info.get("driver_version")
        record(
            "driver_version",
            host,
            check_driver_version(host, driver),
            f"NVIDIA driver {driver} >= {MIN_DRIVER_MAJOR}",
        )
        ctd = info.get("containerd")
        if ctd is None:
            record(
                "cdi",
                host,
                [f"{host}: containerd was not inspected (run the dra_driver role's host.yml on it first)"],
                "",
            )
            continue
        try:
            imports = [(i.get("path"), i.get("text") or "") for i in ctd.get("imports") or []]
            cdi = containerd_cdi(
                ctd.get("config_text"),
                ctd.get("version"),
                imports,
                ctd.get("config_path") or "/etc/containerd/config.toml",
            )
        except DraError as exc:
            cdi = {"enabled": None, "detail": str(exc)}
        problems = [] if cdi["enabled"] else [f"{host}: CDI: {cdi['detail']}"]
        record("cdi", host, problems, cdi["detail"])
    found = device_plugin_pods(pods, nodes)
    for node, host in sorted(nodes.items()):
        problems = []
        if node in found:
            problems.append(
                f"{host}: device plugin pod(s) {', '.join(found[node])} run on node {node}, which is in mode dra: "
                "the DRA driver and a device plugin must not share a node (remove it, or keep it off nodes "
                "labelled gpusplit.io/split=true / nvidia.com/gpu.deploy.device-plugin=false)"
            )
        record("device_plugin", host, problems, f"no device plugin on node {node}")
    return {"ok": not errors, "errors": errors, "warnings": warnings, "checks": checks}


def preflight_table(report):
    header = ("CHECK", "SUBJECT", "RESULT", "DETAIL")
    rows = [
        (c["check"], c["subject"], "skip" if c["ok"] is None else "ok" if c["ok"] else "FAIL", c["detail"])
        for c in report.get("checks") or []
    ]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(3)]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(row[:3], widths, strict=True)) + "  " + row[3]
        for row in [header, *rows]
    ]
    failed = sum(1 for c in report.get("checks") or [] if c["ok"] is False)
    lines.append(f"{len(rows)} check(s), {failed} failed")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# published ResourceSlices against the plan


def published_mig_devices(published, pool, parent_uuid):
    """The names of the MIG devices ``pool`` publishes for GPU ``parent_uuid`` (from published_devices)."""
    want = str(parent_uuid or "").lower()
    return sorted(
        name
        for name, dev in (published.get(pool) or {}).items()
        if want and str(dev.get("parent_uuid") or "").lower() == want
    )


def published_devices(slices, driver=DRIVER):
    """{pool: {device: {uuid, pci_bus_id, node, type, parent_uuid}}} from live ResourceSlices (newest pool generation).

    ``parent_uuid`` is set for MIG devices (the driver's ``parentUUID`` attribute).
    """
    newest = {}
    for s in slices or []:
        spec = s.get("spec") or {}
        if spec.get("driver") != driver:
            continue
        pool = (spec.get("pool") or {}).get("name")
        gen = (spec.get("pool") or {}).get("generation") or 0
        newest[pool] = max(newest.get(pool, 0), gen)
    out = {}
    for s in slices or []:
        spec = s.get("spec") or {}
        pool_spec = spec.get("pool") or {}
        pool = pool_spec.get("name")
        if spec.get("driver") != driver or (pool_spec.get("generation") or 0) != newest.get(pool):
            continue
        for dev in spec.get("devices") or []:
            attrs = dev.get("attributes") or {}
            out.setdefault(pool, {})[dev.get("name")] = {
                "uuid": (attrs.get("uuid") or {}).get("string"),
                "pci_bus_id": (attrs.get("resource.kubernetes.io/pciBusID") or {}).get("string"),
                "node": spec.get("nodeName"),
                "type": (attrs.get("type") or {}).get("string"),
                "parent_uuid": (attrs.get("parentUUID") or {}).get("string"),
            }
    return out


def check_published(plan, slices, driver=DRIVER):
    """Compare what the driver publishes for each DRA node with the plan, before tainting.

    Errors: a device named ``gpu-<minor>`` whose published UUID differs from the planned GPU's
    (the taint would hit another GPU). Warnings: a node whose pool is not published yet (the
    rules take effect once it is), planned GPUs not published.
    """
    published = published_devices(slices, driver)
    errors, warnings, nodes = [], [], []
    for node_plan in dra_node_plans(plan):
        node, host = node_plan["node"], node_plan["host"]
        pool = published.get(node)
        entry = {"node": node, "host": host, "published": pool is not None, "devices": len(pool or {})}
        nodes.append(entry)
        if pool is None:
            warnings.append(
                f"{host}: the DRA driver has not published node {node} yet; its DeviceTaintRules apply once it does"
            )
            continue
        for gpu in node_plan.get("gpus") or []:
            if gpu.get("minor_number") is None:
                continue
            dev = device_name(gpu["minor_number"])
            live = pool.get(dev)
            if gpu.get("mig_enabled") and live is None:
                migs = published_mig_devices(published, node, gpu.get("uuid"))
                entry.setdefault("mig_devices", {})[gpu["uuid"]] = migs
                if not migs and gpu.get("share") in ("host", "excluded"):
                    warnings.append(
                        f"{host}: GPU {gpu['uuid']} has MIG enabled and node {node} publishes none of its MIG "
                        "devices yet; run again once the driver has, so that they get their DeviceTaintRules"
                    )
                continue
            if live is None:
                if gpu.get("health") != "lost":
                    warnings.append(f"{host}: {dev} (GPU {gpu['uuid']}) is not published on node {node}")
                continue
            if live.get("uuid") and live["uuid"].lower() != str(gpu["uuid"]).lower():
                errors.append(
                    f"{host}: node {node} publishes {dev} as GPU {live['uuid']}, but the plan says {dev} is GPU "
                    f"{gpu['uuid']} ({gpu.get('share')} share); a taint on {dev} would hit another GPU. "
                    "Re-run discovery (minor numbers changed?) before tainting"
                )
    return {"ok": not errors, "errors": errors, "warnings": warnings, "nodes": nodes}


# --------------------------------------------------------------------------------------------
# the controller's report on a rule


_MESSAGE_PATTERNS = {
    "published_devices": re.compile(r"(\d+) published devices? selected"),
    "allocated_devices": re.compile(r"(\d+) allocated devices? selected"),
    "pods_would_be_evicted": re.compile(r"(\d+) pods? would be evicted in"),
    "pods_pending_eviction": re.compile(r"(\d+) pods? needs? to be evicted in"),
    "namespaces": re.compile(r"evicted in (\d+) (?:different )?namespaces?"),
    "pods_evicted": re.compile(r"(\d+) pods? evicted since starting the controller"),
}


def parse_eviction_message(message):
    """The numbers in an EvictionInProgress message; absent numbers are None.

    e.g. "3 published devices selected. 1 allocated device selected. 1 pod would be evicted in
    1 namespace if the effect was NoExecute. ..." -> published_devices 3, allocated_devices 1,
    pods_would_be_evicted 1, namespaces 1.
    """
    out = {k: None for k in _MESSAGE_PATTERNS}
    text = message or ""
    for key, pattern in _MESSAGE_PATTERNS.items():
        match = pattern.search(text)
        if match:
            out[key] = int(match.group(1))
    out["final"] = "will not be updated again" in text
    return out


_IMPACT_KEYS = (
    "published_devices",
    "allocated_devices",
    "pods_would_be_evicted",
    "pods_pending_eviction",
    "namespaces",
    "pods_evicted",
)


def impact_summary(impact):
    """``published_devices=1 allocated_devices=1 ...``: the numbers the message gave, one line."""
    parts = [f"{key}={impact[key]}" for key in _IMPACT_KEYS if (impact or {}).get(key) is not None]
    return " ".join(parts) or "no numbers in the message"


def eviction_condition(rule):
    """The rule's EvictionInProgress condition, or None."""
    for cond in ((rule or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == CONDITION_TYPE:
            return cond
    return None


def rule_report(rule):
    """{name, effect, current, status, reason, message, since, impact} of a live rule.

    ``current``: the condition was written for the rule's present generation (the controller
    computes it once per generation; an older one describes an earlier effect).
    """
    rule = rule or {}
    meta = rule.get("metadata") or {}
    cond = eviction_condition(rule) or {}
    impact = parse_eviction_message(cond.get("message"))
    return {
        "name": meta.get("name"),
        "effect": ((rule.get("spec") or {}).get("taint") or {}).get("effect"),
        "device": (rule.get("spec") or {}).get("deviceSelector"),
        "current": bool(cond) and cond.get("observedGeneration") == meta.get("generation"),
        "status": cond.get("status"),
        "reason": cond.get("reason"),
        "message": cond.get("message"),
        "since": cond.get("lastTransitionTime"),
        "impact": impact,
        "summary": impact_summary(impact),
    }


def rule_settled(rule, wait_eviction=False):
    """True when the controller has reported on this generation (and, if asked, evicted)."""
    report = rule_report(rule)
    if not report["current"]:
        return False
    if wait_eviction and report["effect"] == "NoExecute":
        return report["status"] == "False"
    return True


# --------------------------------------------------------------------------------------------
# isolation


def _norm_uuid(value):
    from ansible_collections.gpusplit.k8s.plugins.module_utils._gpu.ids import normalize_uuid

    return (normalize_uuid(value) or "").lower()


def _facts_list(facts):
    if isinstance(facts, dict):
        for key in ("gpus", "nvidia_gpus", "gpusplit_gpus"):
            if isinstance(facts.get(key), list | tuple):
                return list(facts[key])
    return list(facts or [])


def _located(host, entry, gpu):
    minor = gpu.get("minor_number")
    health = gpu.get("health") or {}
    return {
        "host": str(host),
        "node": str(entry.get("node_name") or host),
        "mode": entry.get("mode") or "none",
        "uuid": gpu.get("uuid"),
        "minor_number": minor,
        "device": device_name(minor) if minor is not None else None,
        "pci_bus_id": gpu.get("pci_bus_id"),
        "name": gpu.get("name"),
        "health": health.get("status") or "ok",
        "reasons": list(health.get("reasons") or []),
        "mig_enabled": str((gpu.get("mig_mode") or {}).get("current") or "").lower() == "enabled",
    }


def locate_gpu(fleet_input, uuid):
    """Which host, node, mode and DRA device a GPU UUID is. ``fleet_input``: the planner's input.

    Returns {host, node, mode, uuid, minor_number, device, pci_bus_id, name, health, reasons,
    mig_enabled}; refuses an unknown UUID (naming the hosts searched), a MIG UUID, or a UUID found
    on two hosts.
    """
    want = _norm_uuid(uuid)
    if not want.startswith("gpu-"):
        hint = " (a MIG device: isolate its parent GPU)" if want.startswith("mig-") else ""
        raise DraError(f"{uuid!r} is not a GPU UUID (GPU-...){hint}")
    found = []
    for host in sorted(fleet_input or {}, key=str):
        entry = fleet_input[host] or {}
        for gpu in _facts_list(entry.get("facts")):
            if isinstance(gpu, dict) and _norm_uuid(gpu.get("uuid")) == want:
                found.append(_located(host, entry, gpu))
    if not found:
        hosts = ", ".join(sorted(str(h) for h in fleet_input or {})) or "none"
        raise DraError(f"GPU {uuid} is not on any host of the play (searched: {hosts})")
    if len(found) > 1:
        raise DraError(
            f"GPU {uuid} is reported by several hosts: {', '.join(f['host'] for f in found)} "
            "(a UUID is unique per GPU: are two hosts the same machine? limit the search with -e gpusplit_hosts=<host>)"
        )
    return found[0]


def isolation_findings(gpu):
    """What in one GPU's facts calls for isolating it: lost, uncorrected ECC errors, failed row remapping.

    Pending row remapping or page retirement alone is not a reason (a reset repairs the GPU);
    neither is a corrected error. Returns a list of reasons, empty for a GPU to leave alone.
    """
    health = gpu.get("health") or {}
    if health.get("status") == "lost":
        return list(health.get("reasons") or []) or ["lost"]
    findings = []
    volatile = (gpu.get("ecc") or {}).get("uncorrected_volatile")
    if isinstance(volatile, int) and not isinstance(volatile, bool) and volatile > 0:
        findings.append(f"{volatile} uncorrected ECC error(s) since the driver loaded")
    if (gpu.get("remapped_rows") or {}).get("failure"):
        findings.append("row remapping failed: the GPU cannot repair its memory any more")
    return findings


def unhealthy_gpus(fleet_input):
    """Every GPU of the play that its facts say should leave Kubernetes (see isolation_findings).

    Sorted by host and PCI bus id; each entry is shaped like locate_gpu's answer, with ``why``
    (the findings). A GPU in mode none is listed too; the playbook says there is nothing to do.
    """
    found = []
    for host in sorted(fleet_input or {}, key=str):
        entry = fleet_input[host] or {}
        for gpu in _facts_list(entry.get("facts")):
            if not isinstance(gpu, dict) or not gpu.get("uuid"):
                continue
            why = isolation_findings(gpu)
            if why:
                found.append({**_located(host, entry, gpu), "why": why})
    return sorted(found, key=lambda g: (g["host"], str(g.get("pci_bus_id") or "")))


def isolation_targets(fleet_input, uuid=None, unhealthy=False):
    """The GPUs one isolate_gpu run acts on: the one named by ``uuid``, or every unhealthy one.

    Exactly one of the two must be asked for; a UUID is located (refusing unknown or MIG UUIDs).
    """
    if bool(uuid) == bool(unhealthy):
        raise DraError(
            "name one GPU with -e gpusplit_isolate_uuid=GPU-... or ask for every unhealthy GPU with "
            "-e gpusplit_isolate_unhealthy=true (one of the two, not both)"
        )
    if uuid:
        located = locate_gpu(fleet_input, uuid)
        return [{**located, "why": [f"named by gpusplit_isolate_uuid (health {located['health']})"]}]
    return unhealthy_gpus(fleet_input)


def isolate_facts(facts, uuid, reason=None):
    """A copy of the GPU facts with GPU ``uuid`` (or each of a list) marked lost, so that the planner excludes it.

    The planner has no option to leave one GPU out; a lost GPU is never usable, whatever the
    split says (a split that names it explicitly for Kubernetes is refused, with the planner's
    message). Only the copy is changed.
    """
    wanted = {_norm_uuid(u) for u in (uuid if isinstance(uuid, list | tuple) else [uuid])}
    out = copy.deepcopy(facts)
    gpus = out
    if isinstance(out, dict):
        gpus = next(
            (out[k] for k in ("gpus", "nvidia_gpus", "gpusplit_gpus") if isinstance(out.get(k), list)), []
        )
    hit = set()
    for gpu in gpus or []:
        if isinstance(gpu, dict) and _norm_uuid(gpu.get("uuid")) in wanted:
            health = dict(gpu.get("health") or {})
            reasons = [
                f"isolated by isolate_gpu.yml ({reason or 'isolated'})",
                *(health.get("reasons") or []),
            ]
            gpu["health"] = {"status": "lost", "reasons": reasons}
            hit.add(_norm_uuid(gpu.get("uuid")))
    if wanted - hit:
        raise DraError(f"GPU {', '.join(sorted(wanted - hit))} is not in these facts")
    return out


def isolation_fleet_input(fleet_input, host, uuid, reason=None):
    """The planner input of ``host`` alone, with GPU ``uuid`` (or each of a list) isolated (see isolate_facts)."""
    if host not in (fleet_input or {}):
        raise DraError(f"host {host!r} is not in the planner input")
    entry = dict(fleet_input[host])
    entry["facts"] = isolate_facts(entry.get("facts"), uuid, reason)
    return {host: entry}
