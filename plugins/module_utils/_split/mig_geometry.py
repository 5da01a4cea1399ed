# Copyright: gpusplit contributors
# Apache-2.0
"""The MIG geometry of a node's Kubernetes share, as the inventory declares it. Private to the collection.

``gpusplit_mig_geometry`` maps ``all`` (every MIG-capable GPU of the Kubernetes share) or a GPU's UUID
to the list of MIG profiles that GPU is to have, e.g. ``{all: [3g.40gb, 3g.40gb]}`` or
``{GPU-...: [1g.10gb, 1g.10gb, 2g.20gb]}`` (a UUID's entry wins over ``all``). It is checked after the
split is placed, with every other refusal of the host:

- only the Kubernetes share: a host GPU (or an excluded one) named by UUID is refused, naming it;
- only MIG-capable GPUs: the product is one NVIDIA's MIG user guide lists ("Supported GPUs") and the
  facts show a MIG mode (``mig_mode.current`` enabled or disabled; a GPU without MIG has none);
- profiles that fit: ``<slices>g.<memory>gb`` (``+me`` allowed), their slices adding up to at most the
  GPU's compute slices (7, or 4 on A30 and RTX PRO 6000, 2 on RTX PRO 5000) and none with more memory
  than the GPU has; where each instance is placed is for the driver to decide;
- a MIG strategy that advertises MIG devices (single, with one profile across the share; or mixed).

gpusplit checks the geometry against the GPUs' MIG devices in the facts. Where the GPU Operator runs
(mode gpu_operator), its MIG manager applies it: the node gets a mig-parted config of its own
(:func:`mig_parted_layout`, named by :func:`layout_name`) whose entries list only the Kubernetes share's
GPUs by their index in this run's facts, so the host's GPUs are left out and never touched; a GPU whose
MIG devices differ is a warning there (the plan counts what the GPU has now). In mode device_plugin gpusplit
applies it on the host with nvidia-mig-parted (gpu_host, entry point mig): the plan lists such GPUs in ``mig_changes``
and counts them with the declared profiles (:func:`count_planned`).
Every problem is appended to ``errors``; nothing is raised here.
"""

from __future__ import annotations

import hashlib
import re

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import type_name
from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.scheduling import GPU_RESOURCE_PREFIXES

VAR = "gpusplit_mig_geometry"
# the device plugin's whole-GPU resource, and the prefix of its MIG resources under mig_strategy mixed
_GPU, _MIG_PREFIX = GPU_RESOURCE_PREFIXES
ALL = "all"
_PROFILE_RE = re.compile(r"^([1-8])g\.([1-9][0-9]{0,3})gb(\+me)?$")
# (product pattern, compute slices): NVIDIA MIG user guide, "Supported GPUs" and "Supported MIG Profiles"
_MIG_PRODUCTS = (
    (re.compile(r"\bA30\b"), 4),
    (re.compile(r"\bA100\b"), 7),
    (re.compile(r"\bH100\b"), 7),
    (re.compile(r"\bH200\b"), 7),
    (re.compile(r"\bH20\b"), 7),
    (re.compile(r"\bGH200\b"), 7),
    (re.compile(r"\bB200\b"), 7),
    (re.compile(r"\bGB200\b"), 7),
    (re.compile(r"RTX PRO 6000 Blackwell"), 4),
    (re.compile(r"RTX PRO 5000 Blackwell"), 2),
)


def mig_slices(gpu):
    """The compute slices of a MIG-capable GPU (a :class:`inputs.Gpu`), or None when it has no MIG."""
    if not (gpu.mig_enabled or gpu.mig_mode_known):
        return None
    for pattern, slices in _MIG_PRODUCTS:
        if pattern.search(gpu.name or ""):
            return slices
    return None


def _profiles(host, where, raw, errors):
    if not isinstance(raw, list) or not raw:
        errors.append(
            f"{host}: {where}: expected a list of MIG profiles such as [3g.40gb, 3g.40gb], got {type_name(raw)}"
        )
        return None
    bad = [p for p in raw if not isinstance(p, str) or not _PROFILE_RE.match(p)]
    if bad:
        errors.append(
            f"{host}: {where}: {', '.join(repr(p) for p in bad)} is not a MIG profile (<slices>g.<memory>gb, "
            "e.g. 1g.10gb or 3g.40gb, as nvidia-smi mig -lgip prints them)"
        )
        return None
    return list(raw)


def _fits(host, g, profiles, where, errors):
    slices = mig_slices(g)
    if slices is None:
        errors.append(
            f"{host}: {where}: GPU {g.describe()} ({g.name or 'unknown product'}) has no MIG; only MIG-capable "
            "GPUs (A30, A100, H100, H200, B200, ...) take a MIG geometry"
        )
        return False
    used = sum(int(_PROFILE_RE.match(p).group(1)) for p in profiles)
    memory_gb = (g.memory or 0) / 1024
    too_big = [p for p in profiles if g.memory and int(_PROFILE_RE.match(p).group(2)) > memory_gb + 1]
    if used > slices or too_big:
        why = (
            f"its profiles take {used} compute slices and the GPU has {slices}"
            if used > slices
            else f"{', '.join(too_big)} asks for more memory than the GPU's {memory_gb:.0f} GB"
        )
        errors.append(f"{host}: {where}: [{', '.join(profiles)}] does not fit GPU {g.describe()}: {why}")
        return False
    return True


def read_mig_geometry(host, raw, st, share_kubernetes, errors):
    """The geometry of ``host`` checked against its placed split ``st`` (planner._Split):
    {uuid: [profile, ...]} for the Kubernetes share's GPUs it names, or None without one."""
    st.mig_changes = []  # the GPUs whose geometry this run applies (_check_applied)
    if raw is None or raw == {}:
        return None
    if not isinstance(raw, dict):
        errors.append(
            f"{host}: {VAR}: expected a mapping of all or a GPU UUID to MIG profiles, got {type_name(raw)}"
        )
        return None
    mode = st.mode_info
    if not mode.split_plugin:
        errors.append(
            f"{host}: {VAR}: mode {mode.name} has no MIG geometry of gpusplit's (modes device_plugin and gpu_operator)"
        )
        return None
    if st.mig_strategy == "none":
        errors.append(
            f"{host}: {VAR}: mig_strategy 'none' advertises whole GPUs only; set gpusplit_mig_strategy single or "
            "mixed so that the MIG devices are advertised"
        )
        return None
    by_uuid = {g.uuid.lower(): g for g in st.gpus if g.uuid}
    wanted = {}
    before = len(errors)
    for key in raw:
        where = f"{VAR}.{key}"
        if key == ALL:
            continue
        g = by_uuid.get(str(key).lower()) if isinstance(key, str) else None
        if g is None:
            errors.append(
                f"{host}: {where}: no GPU of this host has this UUID (use all, or a GPU UUID GPU-...)"
            )
            continue
        if st.share[g.key] != share_kubernetes:
            errors.append(
                f"{host}: {where}: GPU {g.describe()} is in the {st.share[g.key]} share; gpusplit never changes the MIG "
                "geometry of a GPU outside the Kubernetes share"
            )
            continue
        profiles = _profiles(host, where, raw[key], errors)
        if profiles is not None and _fits(host, g, profiles, where, errors):
            wanted[g.uuid] = profiles
    if ALL in raw:
        profiles = _profiles(host, f"{VAR}.{ALL}", raw[ALL], errors)
        kube = [g for g in st.gpus if st.share[g.key] == share_kubernetes and g.uuid not in wanted]
        capable = [g for g in kube if mig_slices(g) is not None]
        if profiles is not None and not capable and not wanted:
            errors.append(f"{host}: {VAR}.{ALL}: no GPU of the Kubernetes share has MIG")
        for g in capable if profiles is not None else ():
            if _fits(host, g, profiles, f"{VAR}.{ALL}", errors):
                wanted[g.uuid] = profiles
    if len(errors) != before:
        return None
    if st.mig_strategy == "single" and len({p for ps in wanted.values() for p in ps}) > 1:
        errors.append(
            f"{host}: {VAR}: mig_strategy single needs one MIG profile across the Kubernetes share, the geometry has "
            f"{', '.join(sorted({p for ps in wanted.values() for p in ps}))} (use mig_strategy mixed)"
        )
        return None
    _check_applied(host, st, wanted, errors)
    return {u: wanted[u] for u in sorted(wanted)} if not errors[before:] else None


def mig_parted_entry(index, profiles):
    """One entry of a mig-parted config (``version: v1``, ``mig-configs``: name -> entries, each with
    ``devices`` as GPU indices, ``mig-enabled`` and ``mig-devices`` as profile -> count, as the GPU
    Operator's chart documents it under ``migManager.config``) for the GPU at ``index``."""
    counts = {}
    for p in profiles:
        counts[p] = counts.get(p, 0) + 1
    return {"devices": [index], "mig-enabled": True, "mig-devices": {p: counts[p] for p in sorted(counts)}}


LAYOUT_PREFIX = "gpusplit-"
_LABEL_VALUE_MAX = 63


def layout_name(node):
    """The name of ``node``'s own entry in a mig-parted config (and the value of its ``nvidia.com/mig.config``
    label): ``gpusplit-<node>``, or ``gpusplit-<12 hex digits of the name's SHA-256>`` where that is longer than
    a label value may be (63 characters)."""
    name = f"{LAYOUT_PREFIX}{node}"
    if len(name) <= _LABEL_VALUE_MAX:
        return name
    return LAYOUT_PREFIX + hashlib.sha256(str(node).encode()).hexdigest()[:12]


def mig_parted_layout(node_plan):
    """The entries of ``node_plan``'s own mig-parted config: one per GPU of its ``mig_geometry`` (all of them
    in the Kubernetes share), by the GPU's index in this run's facts, in index order. The host's GPUs and
    the Kubernetes GPUs without a declared geometry are left out, which mig-parted reads as "leave alone"
    (it walks only the GPUs an entry's ``devices`` selects). [] without a geometry."""
    geometry = node_plan.get("mig_geometry") or {}
    by_uuid = {g["uuid"]: g for g in node_plan.get("gpus") or []}
    entries = []
    for uuid in sorted(geometry, key=lambda u: by_uuid[u]["index"]):
        g = by_uuid[uuid]
        if g["share"] != "kubernetes":
            raise ValueError(f"GPU {uuid} is in the {g['share']} share; its MIG geometry is not gpusplit's")
        entries.append(mig_parted_entry(g["index"], geometry[uuid]))
    return entries


def _differs(g, profiles):
    have = sorted(str(m["profile"]) for m in g.migs) if g.mig_enabled else []
    return have if have != sorted(profiles) else None


def _check_applied(host, st, wanted, errors):
    """Each GPU whose MIG devices in the facts are not the declared ones: under the GPU Operator
    (operator_managed) its MIG manager applies the node's own layout, a warning (the plan counts what the GPU
    has now); in mode device_plugin gpusplit applies it on the host (gpu_host mig, plugin_utils/mig_apply.py),
    recorded in ``st.mig_changes`` ({uuid, index, now, want}). Only modes with the split plugin get here
    (read_mig_geometry refuses the others)."""
    by_uuid = {g.uuid: g for g in st.gpus if g.uuid}
    for uuid, profiles in sorted(wanted.items(), key=lambda item: by_uuid[item[0]].index):
        g = by_uuid[uuid]
        have = _differs(g, profiles)
        if have is None:
            continue
        now = f"MIG devices [{', '.join(have)}]" if g.mig_enabled else "MIG disabled"
        if st.mode_info.operator_managed:
            st.warnings.append(
                f"{VAR}: GPU {g.describe()} has {now}, the inventory declares [{', '.join(profiles)}]; the GPU "
                "Operator's MIG manager applies it to the Kubernetes share's GPUs only (this node's own mig-parted "
                "config). The plan counts what the GPU has now: run gpusplit again once the node's "
                "nvidia.com/mig.config.state is success"
            )
            continue
        st.mig_changes.append(
            {
                "uuid": g.uuid,
                "index": g.index,
                "now": have if g.mig_enabled else None,
                "want": sorted(profiles),
            }
        )


def count_planned(plan, st, geometry):
    """``plan`` with ``geometry`` (``mig_geometry``) and the GPUs of ``st.mig_changes`` (:func:`_check_applied`'s,
    as ``mig_changes``) counted as they are after the apply: their MIG devices leave the resources and
    ``kubernetes_mig_uuids`` (the apply destroys them), the declared profiles enter the resources as the device
    plugin advertises them once it restarts. Returns ``plan``."""
    changes = st.mig_changes
    plan["mig_geometry"] = geometry
    plan["mig_changes"] = [dict(c) for c in changes]
    if not changes:
        return plan

    def resource_of(profile):
        return _GPU if profile is None or st.mig_strategy == "single" else _MIG_PREFIX + profile

    resources = dict(plan["resources"])
    by_uuid = {g["uuid"]: g for g in plan.get("gpus") or []}
    gone = set()
    for change in changes:
        for profile in change["now"] or [None]:
            resources[resource_of(profile)] -= 1
        gone.update(by_uuid[change["uuid"]].get("mig_uuids") or [])
        for profile in change["want"]:
            resources[resource_of(profile)] = resources.get(resource_of(profile), 0) + 1
    # a resource the node advertised before stays in the plan at 0 (verify then expects none of it)
    plan["resources"] = {k: v for k, v in sorted(resources.items()) if v or k in plan["resources"]}
    plan["kubernetes_mig_uuids"] = [u for u in plan.get("kubernetes_mig_uuids") or [] if u not in gone]
    if isinstance(plan.get("resource_name"), list):
        plan["resource_name"] = [k for k, v in plan["resources"].items() if v] or plan["resource_name"]
    return plan
