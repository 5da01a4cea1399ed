"""Pure split planner: which GPUs of a host go to Kubernetes, which stay with the host.

No I/O and no Ansible imports: the functions take GPU facts (as reported by the module
``nvidia_gpu_facts``) plus the inventory's wishes and return plain dicts, deterministic for
any order of the facts. Every refusal is collected (per host, then across the fleet) and
raised once as :class:`PlanError`, each message naming the host and the offending value.

See docs/split.md for the schema of the plan and the rules.
"""

from __future__ import annotations

import fnmatch
import re

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError
from ansible_collections.gpusplit.k8s.plugins.module_utils._gpu.ids import (
    normalize_pci_bus_id,
    normalize_uuid,
    pci_sort_key,
)

MODES = ("device_plugin", "gpu_operator", "dra", "none")
DEVICE_PLUGIN_MODES = ("device_plugin", "gpu_operator")
MIG_STRATEGIES = ("none", "single", "mixed")
KUBERNETES_SELECTORS = ("count", "uuids", "pci_bus_ids", "indices", "product")
HOST_SELECTORS = ("host_count", "host_uuids", "host_pci_bus_ids", "host_indices")
SPLIT_KEYS = KUBERNETES_SELECTORS + HOST_SELECTORS
FLEET_ENTRY_KEYS = ("facts", "mode", "split", "mig_strategy", "exclude_unhealthy", "node_name")

GPU_RESOURCE = "nvidia.com/gpu"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
SHARE_KUBERNETES = "kubernetes"
SHARE_HOST = "host"
SHARE_EXCLUDED = "excluded"

_HEALTH_STATES = ("ok", "degraded", "lost")
_GPU_UUID_RE = re.compile(r"^gpu-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_MAX_LISTED = 16


class PlanError(GpusplitError):
    """One or more refusals; ``errors`` holds every message (each names host and value)."""


# --------------------------------------------------------------------------------------------
# normalisation helpers (public: the renderers and the verify code use the same spelling)


def short_pci(canonical):
    """``00000000:17:00.0`` -> ``17:00.0`` (the domain stays when it is not 0)."""
    if canonical.startswith("00000000:"):
        return canonical[9:]
    return canonical


def mig_resource_name(profile):
    """The device plugin's resource for a MIG profile under mig_strategy mixed."""
    return MIG_RESOURCE_PREFIX + str(profile)


def _int_or_none(value):
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


def _fmt_list(values):
    values = list(values)
    if not values:
        return "none"
    shown = ", ".join(str(v) for v in values[:_MAX_LISTED])
    if len(values) > _MAX_LISTED:
        shown += f", ... ({len(values)} in all)"
    return shown


# --------------------------------------------------------------------------------------------
# GPU facts


class _Gpu:
    __slots__ = (
        "uuid",
        "key",
        "pci",
        "sort_key",
        "index",
        "minor",
        "name",
        "memory",
        "mig_enabled",
        "mig_pending",
        "migs",
        "health",
        "health_reasons",
        "host_procs",
    )

    def describe(self):
        return f"{self.uuid} ({self.pci}, index {self.index})"


def _mig_sort_key(m):
    def num(v):
        return v if v is not None else -1

    return (num(m["gpu_instance_id"]), num(m["compute_instance_id"]), num(m["index"]), m["uuid"])


def _norm_mig_devices(host, gpu_uuid, raw, errors):
    migs = []
    if raw is None:
        return migs
    if not isinstance(raw, list | tuple):
        errors.append(f"{host}: facts: mig_devices of GPU {gpu_uuid} is not a list: {raw!r}")
        return migs
    for item in raw:
        if not isinstance(item, dict) or not isinstance(item.get("uuid"), str):
            errors.append(f"{host}: facts: a MIG device of GPU {gpu_uuid} has no uuid: {item!r}")
            continue
        migs.append(
            {
                "uuid": normalize_uuid(item["uuid"]),
                "index": _int_or_none(item.get("index")),
                "profile": item.get("profile"),
                "gpu_instance_id": _int_or_none(item.get("gpu_instance_id")),
                "compute_instance_id": _int_or_none(item.get("compute_instance_id")),
                "memory_total_mib": _int_or_none(item.get("memory_total_mib")),
            }
        )
    migs.sort(key=_mig_sort_key)
    return migs


def _norm_health(raw):
    health = raw.get("health") if isinstance(raw.get("health"), dict) else {}
    status = health.get("status") or "ok"
    reasons = [str(r) for r in (health.get("reasons") or [])]
    if not isinstance(status, str) or status.lower() not in _HEALTH_STATES:
        reasons = [f"unknown health status {status!r}", *reasons]
        status = "degraded"
    return status.lower(), reasons


def _norm_gpu(host, pos, raw, errors):
    if not isinstance(raw, dict):
        errors.append(f"{host}: facts: GPU #{pos} is not a mapping: {raw!r}")
        return None
    health, reasons = _norm_health(raw)
    uuid = normalize_uuid(raw.get("uuid"))
    pci = normalize_pci_bus_id(raw.get("pci_bus_id"))
    index = _int_or_none(raw.get("index"))
    minor = _int_or_none(raw.get("minor_number"))
    valid_uuid = bool(uuid) and _GPU_UUID_RE.match(uuid.lower()) is not None
    if valid_uuid and pci is not None:
        key = uuid.lower()
        sort_key = pci_sort_key(pci)
    elif health != "ok":
        # a lost GPU, or one the driver would not open (no permission, unsupported), may not tell
        # its identity: keep it, excluded (usable() refuses a GPU without UUID), after the others
        uuid = uuid if valid_uuid else None
        key = (
            uuid.lower()
            if uuid
            else f"unidentified:{raw.get('uuid')}:{raw.get('pci_bus_id')}:{index}:{minor}"
        )
        sort_key = (1 << 40, -1 if index is None else index, -1 if minor is None else minor, key)
    elif not valid_uuid:
        errors.append(f"{host}: facts: GPU #{pos} has no valid GPU UUID: {raw.get('uuid')!r}")
        return None
    else:
        errors.append(f"{host}: facts: GPU {uuid} has no valid pci_bus_id: {raw.get('pci_bus_id')!r}")
        return None
    g = _Gpu()
    g.uuid = uuid
    g.key = key
    g.pci = pci
    g.sort_key = sort_key
    g.index = index
    g.minor = minor
    g.name = raw.get("name") if isinstance(raw.get("name"), str) else ""
    g.memory = _int_or_none(raw.get("memory_total_mib"))
    mig_mode = raw.get("mig_mode") if isinstance(raw.get("mig_mode"), dict) else {}
    current = mig_mode.get("current")
    pending = mig_mode.get("pending")
    g.mig_enabled = isinstance(current, str) and current.lower() == "enabled"
    g.mig_pending = pending if isinstance(pending, str) else None
    if g.mig_pending is not None and isinstance(current, str) and pending.lower() == current.lower():
        g.mig_pending = None
    g.migs = _norm_mig_devices(host, uuid, raw.get("mig_devices"), errors)
    g.health = health
    g.health_reasons = reasons
    g.host_procs = [
        p for p in (raw.get("processes") or []) if isinstance(p, dict) and p.get("in_container") is not True
    ]
    return g


def _norm_facts(host, facts, errors):
    """Validate and normalise the facts; return the GPUs sorted by PCI bus id."""
    if isinstance(facts, dict):
        for key in ("gpus", "nvidia_gpus", "gpusplit_gpus"):
            if isinstance(facts.get(key), list | tuple):
                facts = facts[key]
                break
    if facts is None:
        errors.append(f"{host}: facts: no GPU facts for this host (run nvidia_gpu_facts first)")
        return []
    if not isinstance(facts, list | tuple):
        errors.append(f"{host}: facts: expected a list of GPUs, got {type(facts).__name__}")
        return []
    gpus = []
    seen_uuid = set()
    seen_pci = {}
    for pos, raw in enumerate(facts):
        g = _norm_gpu(host, pos, raw, errors)
        if g is None:
            continue
        if g.key in seen_uuid:
            errors.append(f"{host}: facts: GPU UUID {g.uuid} is reported twice")
            continue
        if g.pci is not None and g.pci in seen_pci:
            errors.append(
                f"{host}: facts: PCI bus id {g.pci} is reported for both {seen_pci[g.pci]} and {g.uuid}"
            )
            continue
        seen_uuid.add(g.key)
        if g.pci is not None:
            seen_pci[g.pci] = g.uuid
        gpus.append(g)
    gpus.sort(key=lambda g: g.sort_key)
    return gpus


# --------------------------------------------------------------------------------------------
# selectors


def _as_value_list(host, key, value, errors):
    if isinstance(value, str):
        values = [v for v in (part.strip() for part in value.split(",")) if v]
    elif isinstance(value, list | tuple):
        values = list(value)
    else:
        errors.append(f"{host}: split.{key}: expected a list, got {value!r}")
        return None
    if not values:
        instead = "host_count: 0" if key.startswith("host_") else "count: 0"
        errors.append(f"{host}: split.{key}: {value!r} selects nothing (write {instead} to mean none)")
        return None
    return values


def _dedupe(key, selected, warnings):
    out = []
    seen = set()
    for g in selected:
        if g.key in seen:
            warnings.append(f"split.{key} names GPU {g.uuid} more than once")
            continue
        seen.add(g.key)
        out.append(g)
    return out


_LEGACY_MIG_RE = re.compile(r"^MIG-(GPU-[0-9a-f-]+)/(\d+)/(\d+)$")


def _mig_lookup(gpus):
    """{lower MIG uuid or legacy MIG-GPU-<uuid>/<gi>/<ci>: (parent gpu, mig)}."""
    out = {}
    for g in gpus:
        for m in g.migs:
            out[m["uuid"].lower()] = (g, m)
            if m["gpu_instance_id"] is not None and m["compute_instance_id"] is not None:
                legacy = f"MIG-{g.uuid}/{m['gpu_instance_id']}/{m['compute_instance_id']}"
                out[legacy.lower()] = (g, m)
    return out


def _resolve_mig_picks(host, key, picks, mig_refusal, errors):
    """Whole parent GPUs for MIG devices named in split.<key>, or None after a refusal.

    A split device plugin that sees a GPU advertises every MIG device on it (it has no per-MIG
    filter), so a GPU's MIG devices can only go to one share together: naming some of them and
    not the others is refused, naming all of them selects the GPU.
    """
    if not picks:
        return []
    if mig_refusal:
        named = [m["uuid"] for _, ms in picks.values() for m in ms]
        what = "is a MIG device" if len(named) == 1 else "are MIG devices"
        errors.append(f"{host}: split.{key}: {_fmt_list(named)} {what}; {mig_refusal}")
        return None
    out = []
    for parent, named in picks.values():
        names = {m["uuid"] for m in named}
        missing = [m for m in parent.migs if m["uuid"] not in names]
        if missing:
            errors.append(
                f"{host}: split.{key} names {len(names)} of the {len(parent.migs)} MIG devices of GPU "
                f"{parent.describe()} ({_fmt_list(sorted(names))}); a device plugin that sees the GPU "
                f"advertises all of them, so {_fmt_list(m['uuid'] for m in missing)} would go to the "
                "same share: name every MIG device of the GPU, or change its MIG layout "
                "(nvidia.com/mig.config) so that it holds only the devices for this share"
            )
            continue
        out.append(parent)
    return out if len(out) == len(picks) else None


def _resolve_uuids(host, key, value, gpus, errors, warnings, mig_refusal=None):
    """GPUs named by GPU UUID, or by the MIG UUIDs of all their MIG devices.

    ``mig_refusal``: why MIG devices cannot be selected on this host (mode, MIG strategy), or
    None when they can.
    """
    values = _as_value_list(host, key, value, errors)
    if values is None:
        return None
    by_uuid = {g.key: g for g in gpus}
    migs = _mig_lookup(gpus)
    out = []
    picks = {}  # parent key -> (parent, [mig, ...]) in the order named
    ok = True
    for raw in values:
        norm = normalize_uuid(raw)
        low = norm.lower() if norm else None
        if low in by_uuid:
            out.append(by_uuid[low])
        elif low in migs:
            parent, mig = migs[low]
            entry = picks.setdefault(parent.key, (parent, []))
            if mig in entry[1]:
                warnings.append(f"split.{key} names MIG device {mig['uuid']} more than once")
            else:
                entry[1].append(mig)
        elif norm is None:
            ok = False
            errors.append(f"{host}: split.{key}: {raw!r} is not a GPU UUID")
        else:
            ok = False
            if norm.startswith("MIG-"):
                known = _fmt_list(m["uuid"] for g in gpus for m in g.migs)
                errors.append(
                    f"{host}: split.{key}: unknown MIG device UUID {raw!r} (MIG devices on this host: {known})"
                )
            else:
                known = _fmt_list(g.uuid for g in gpus)
                errors.append(f"{host}: split.{key}: unknown GPU UUID {raw!r} (this host has: {known})")
    parents = _resolve_mig_picks(host, key, picks, mig_refusal, errors)
    if not ok or parents is None:
        return None
    named_whole = {g.key for g in out}
    for parent in parents:
        if parent.key in named_whole:
            warnings.append(f"split.{key} names GPU {parent.uuid} and also each of its MIG devices")
        else:
            out.append(parent)
    return _dedupe(key, out, warnings)


def _resolve_pci(host, key, value, gpus, errors, warnings):
    values = _as_value_list(host, key, value, errors)
    if values is None:
        return None
    by_pci = {g.pci: g for g in gpus}
    out = []
    ok = True
    for raw in values:
        norm = normalize_pci_bus_id(raw)
        if norm is None:
            errors.append(
                f"{host}: split.{key}: {raw!r} is not a PCI bus id (expected e.g. 00000000:17:00.0)"
            )
            ok = False
        elif norm not in by_pci:
            known = _fmt_list(g.pci for g in gpus)
            errors.append(f"{host}: split.{key}: unknown PCI bus id {raw!r} (this host has: {known})")
            ok = False
        else:
            out.append(by_pci[norm])
    if not ok:
        return None
    return _dedupe(key, out, warnings)


def _resolve_indices(host, key, value, gpus, errors, warnings):
    if isinstance(value, int) and not isinstance(value, bool):
        value = [value]
    values = _as_value_list(host, key, value, errors)
    if values is None:
        return None
    by_index = {g.index: g for g in gpus if g.index is not None}
    out = []
    ok = True
    for raw in values:
        idx = _int_or_none(raw)
        if idx is None:
            errors.append(f"{host}: split.{key}: {raw!r} is not a GPU index")
            ok = False
        elif idx not in by_index:
            known = _fmt_list(sorted(by_index))
            errors.append(f"{host}: split.{key}: unknown GPU index {raw!r} (this host has: {known})")
            ok = False
        else:
            out.append(by_index[idx])
    if not ok:
        return None
    out = _dedupe(key, out, warnings)
    stable = key.replace("indices", "uuids")
    warnings.append(
        f"split.{key}: NVML indices are not stable across reboots; today they are "
        f"{_fmt_list(g.uuid for g in out)} - prefer split.{stable}"
    )
    return out


_RESOLVERS = {
    "uuids": _resolve_uuids,
    "pci_bus_ids": _resolve_pci,
    "indices": _resolve_indices,
    "host_uuids": _resolve_uuids,
    "host_pci_bus_ids": _resolve_pci,
    "host_indices": _resolve_indices,
}


def _parse_count(host, key, value, errors):
    count = _int_or_none(value)
    if count is None or count < 0:
        errors.append(f"{host}: split.{key}: {value!r} is not a whole number >= 0")
        return None
    return count


def _product_patterns(host, value, errors):
    if isinstance(value, str):
        patterns = [value]
    elif isinstance(value, list | tuple) and value and all(isinstance(v, str) for v in value):
        patterns = list(value)
    else:
        errors.append(f"{host}: split.product: expected a product name or glob, got {value!r}")
        return None
    patterns = [p.strip().lower() for p in patterns]
    if not all(patterns):
        errors.append(f"{host}: split.product: empty product name in {value!r}")
        return None
    return patterns


def _product_matches(name, patterns):
    low = name.lower()
    return any(low == p or fnmatch.fnmatchcase(low, p) for p in patterns)


# --------------------------------------------------------------------------------------------
# planning


def _health_reason(g):
    text = f"health {g.health}"
    if g.health_reasons:
        text += ": " + "; ".join(g.health_reasons)
    return text


def _usable_summary(gpus, share, usable):
    parts = [f"{len(gpus)} GPU(s) on the host"]
    lost = sum(1 for g in gpus if g.health == "lost")
    degraded = sum(1 for g in gpus if g.health == "degraded" and not usable(g))
    if lost:
        parts.append(f"{lost} lost")
    if degraded:
        parts.append(f"{degraded} degraded")
    if share:
        parts.append(f"{len(share)} already placed by the other selector")
    return ", ".join(parts)


class _Split:
    """The working state of one host's plan."""

    def __init__(self, host, gpus, mode, mig_strategy, exclude_unhealthy, errors, warnings):
        self.host = host
        self.gpus = gpus
        self.mode = mode
        self.mig_strategy = mig_strategy
        self.exclude_unhealthy = exclude_unhealthy
        self.errors = errors
        self.warnings = warnings
        self.share = {}  # gpu key -> share
        self.origin = {}  # gpu key -> what put it there (for messages)
        self.excluded_reason = {}
        self.k_sel = None
        self.h_sel = None

    def usable(self, g):
        if g.health == "lost" or g.uuid is None or g.pci is None:
            return False
        return g.health == "ok" or not self.exclude_unhealthy

    def put(self, g, share, origin):
        self.share[g.key] = share
        self.origin[g.key] = origin

    def left(self):
        return [g for g in self.gpus if g.key not in self.share and self.usable(g)]


def _mig_selection_refusal(st):
    """Why this host's split cannot name MIG devices, or None when it can."""
    if st.mode == "dra":
        return (
            "mode dra keeps the host share off Kubernetes with one DeviceTaintRule per whole GPU "
            "(gpu-<minor>); name the parent GPU instead"
        )
    if st.mig_strategy == "none":
        return (
            "mig_strategy 'none' advertises whole GPUs only; set mig_strategy single or mixed "
            "to hand out MIG devices"
        )
    return None


def _read_split(st, split):
    """Validate the split mapping; return the parsed selections or None on error."""
    host, errors, warnings = st.host, st.errors, st.warnings
    if split is None:
        split = {}
    if not isinstance(split, dict):
        errors.append(f"{host}: split: expected a mapping, got {split!r}")
        return None
    unknown = sorted(str(k) for k in split if k not in SPLIT_KEYS)
    if unknown:
        errors.append(
            f"{host}: split: unknown key(s) {', '.join(unknown)} (allowed: {', '.join(SPLIT_KEYS)})"
        )
    k_keys = [k for k in KUBERNETES_SELECTORS if split.get(k) is not None]
    h_keys = [k for k in HOST_SELECTORS if split.get(k) is not None]
    for side, keys, allowed in (
        ("Kubernetes", k_keys, KUBERNETES_SELECTORS),
        ("host", h_keys, HOST_SELECTORS),
    ):
        if len(keys) > 1:
            errors.append(
                f"{host}: split: more than one selector for the {side} share: {', '.join(keys)} "
                f"(use exactly one of {', '.join(allowed)})"
            )
    if not k_keys and not h_keys and not unknown:
        errors.append(
            f"{host}: split: {split!r} names no selector; give exactly one of {', '.join(SPLIT_KEYS)} "
            "(host_count: 0 gives Kubernetes every GPU)"
        )
    if errors:
        return None
    st.k_sel = k_sel = k_keys[0] if k_keys else None
    st.h_sel = h_sel = h_keys[0] if h_keys else None
    sel = {"k_explicit": None, "h_explicit": None, "k_count": None, "h_count": None, "patterns": None}
    for side, key in (("k_explicit", k_sel), ("h_explicit", h_sel)):
        if key in _RESOLVERS:
            extra = {"mig_refusal": _mig_selection_refusal(st)} if key.endswith("uuids") else {}
            sel[side] = _RESOLVERS[key](host, key, split[key], st.gpus, errors, warnings, **extra)
    if k_sel == "count":
        sel["k_count"] = _parse_count(host, k_sel, split[k_sel], errors)
    if h_sel == "host_count":
        sel["h_count"] = _parse_count(host, h_sel, split[h_sel], errors)
    if k_sel == "product":
        sel["patterns"] = _product_patterns(host, split["product"], errors)
        sel["product"] = split["product"]
    if errors:
        return None
    return sel


def _place_explicit(st, sel):
    host, k_sel, h_sel = st.host, st.k_sel, st.h_sel
    k_explicit, h_explicit = sel["k_explicit"], sel["h_explicit"]
    if k_explicit is not None and h_explicit is not None:
        host_keys = {g.key for g in h_explicit}
        for g in k_explicit:
            if g.key in host_keys:
                st.errors.append(
                    f"{host}: split.{k_sel} and split.{h_sel} both name GPU {g.describe()}; "
                    "a GPU belongs to one share"
                )
        if st.errors:
            return
    for g in h_explicit or ():
        st.put(g, SHARE_HOST, "split." + h_sel)
        if g.health != "ok":
            st.warnings.append(
                f"GPU {g.uuid} is kept for the host by split.{h_sel} although its {_health_reason(g)}"
            )
    for g in k_explicit or ():
        st.put(g, SHARE_KUBERNETES, "split." + k_sel)
        if g.health == "lost":
            st.errors.append(
                f"{host}: split.{k_sel} selects GPU {g.describe()} into the Kubernetes share, "
                f"but the GPU is lost ({_health_reason(g)})"
            )
        elif g.health != "ok":
            st.warnings.append(
                f"GPU {g.uuid} is given to Kubernetes by split.{k_sel} although its {_health_reason(g)}"
            )


def _place_product(st, sel):
    patterns = sel["patterns"]
    matched = [g for g in st.gpus if _product_matches(g.name, patterns)]
    if not matched:
        names = _fmt_list(sorted({g.name for g in st.gpus}))
        st.errors.append(
            f"{st.host}: split.product {sel['product']!r} matches no GPU on this host (products: {names})"
        )
        return
    # the host's explicit list was placed first: a GPU it names must not match the product too
    overlap = [g for g in matched if st.share.get(g.key) == SHARE_HOST]
    if overlap:
        st.errors.append(
            f"{st.host}: split.product {sel['product']!r} and {st.origin[overlap[0].key]} both name "
            f"GPU(s) {_fmt_list(g.describe() for g in overlap)}; a GPU belongs to one share (narrow the "
            f"product pattern, or keep only GPUs of other products in {st.origin[overlap[0].key]})"
        )
        return
    picked = [g for g in matched if st.usable(g)]
    if not picked:
        st.errors.append(
            f"{st.host}: split.product {sel['product']!r} matches only GPUs that are unhealthy: "
            f"{_fmt_list(g.describe() for g in matched)}"
        )
        return
    for g in picked:
        st.put(g, SHARE_KUBERNETES, "split.product")


def _place_counts(st, sel, whole_gpu_only):
    host = st.host
    h_count, k_count = sel["h_count"], sel["k_count"]
    if h_count is not None:
        candidates = st.left()
        if h_count > len(candidates):
            st.errors.append(
                f"{host}: split.host_count {h_count} is more than the {len(candidates)} usable GPU(s) "
                f"left for it ({_usable_summary(st.gpus, st.share, st.usable)})"
            )
            return
        for g in candidates[:h_count]:
            st.put(g, SHARE_HOST, "split.host_count")
    if k_count is not None:
        candidates = st.left()
        skipped = []
        if whole_gpu_only:
            skipped = [g for g in candidates if g.mig_enabled]
            candidates = [g for g in candidates if not g.mig_enabled]
        if k_count > len(candidates):
            detail = _usable_summary(st.gpus, st.share, st.usable)
            if skipped:
                detail += (
                    f"; {len(skipped)} more have MIG enabled, which mig_strategy 'none' cannot advertise"
                )
            st.errors.append(
                f"{host}: split.count {k_count} is more than the {len(candidates)} usable GPU(s) ({detail})"
            )
            return
        if k_count == 0:
            st.warnings.append("split.count is 0: Kubernetes gets no GPU on this node")
        for g in candidates[:k_count]:
            st.put(g, SHARE_KUBERNETES, "split.count")
        for g in skipped:
            st.warnings.append(
                f"GPU {g.uuid} has MIG enabled; split.count skipped it (mig_strategy 'none') "
                "and it stays with the host"
            )


def _place_rest(st):
    k_sel, h_sel = st.k_sel, st.h_sel
    for g in st.gpus:
        if g.key in st.share:
            continue
        if not st.usable(g):
            st.share[g.key] = SHARE_EXCLUDED
            st.excluded_reason[g.key] = _health_reason(g)
        elif k_sel is None:
            st.put(g, SHARE_KUBERNETES, f"the rest (not named by split.{h_sel})")
        else:
            st.put(g, SHARE_HOST, f"the rest (not selected by split.{k_sel})")
            if h_sel is not None:
                st.warnings.append(
                    f"GPU {g.uuid} is named by neither split.{k_sel} nor split.{h_sel}; "
                    "it stays with the host"
                )


def _check_mig(st, whole_gpu_only):
    host = st.host
    kube = [g for g in st.gpus if st.share[g.key] == SHARE_KUBERNETES]
    if whole_gpu_only:
        for g in kube:
            if g.mig_enabled:
                st.errors.append(
                    f"{host}: {st.origin[g.key]} gives GPU {g.describe()} to Kubernetes as a whole GPU, "
                    "but its MIG mode is enabled; set mig_strategy single or mixed, disable MIG, "
                    "or keep it for the host"
                )
        return
    if st.mode not in DEVICE_PLUGIN_MODES:
        return
    mig_on = [g for g in kube if g.mig_enabled]
    if st.mig_strategy == "single":
        if mig_on and len(mig_on) != len(kube):
            st.errors.append(
                f"{host}: mig_strategy single needs one MIG mode across the Kubernetes share; "
                f"MIG enabled: {_fmt_list(g.uuid for g in mig_on)}; "
                f"MIG disabled: {_fmt_list(g.uuid for g in kube if not g.mig_enabled)}"
            )
        for g in mig_on:
            if not g.migs:
                st.errors.append(
                    f"{host}: mig_strategy single: GPU {g.describe()} has MIG enabled but no MIG devices"
                )
        profiles = sorted({str(m["profile"]) for g in mig_on for m in g.migs})
        if len(profiles) > 1:
            st.errors.append(
                f"{host}: mig_strategy single needs one MIG profile across the Kubernetes share, "
                f"found {', '.join(profiles)} (use mig_strategy mixed)"
            )
    else:  # mixed
        for g in mig_on:
            if not g.migs:
                st.warnings.append(
                    f"GPU {g.uuid} has MIG enabled but no MIG devices: Kubernetes gets nothing from it"
                )
            for m in g.migs:
                if not m["profile"]:
                    st.errors.append(
                        f"{host}: mig_strategy mixed: MIG device {m['uuid']} of GPU {g.uuid} has no profile"
                    )


def _check_dra(st):
    for g in st.gpus:
        share = st.share[g.key]
        if share == SHARE_EXCLUDED and g.minor is None and (g.health == "lost" or g.uuid is None):
            st.warnings.append(
                f"mode dra: {g.health} GPU {g.describe()} has no minor_number; no DeviceTaintRule can name it"
            )
        elif share != SHARE_KUBERNETES and g.minor is None:
            st.errors.append(
                f"{st.host}: mode dra: GPU {g.describe()} has no minor_number, "
                "so its DRA device name gpu-<minor> is unknown"
            )
        if share == SHARE_HOST and g.mig_enabled:
            st.warnings.append(
                f"mode dra: GPU {g.uuid} has MIG enabled; its MIG devices get DeviceTaintRules by the names "
                "the DRA driver publishes, so they are covered only once the driver has published them"
            )


def _final_warnings(st):
    for g in st.gpus:
        if g.mig_pending is not None:
            st.warnings.append(
                f"GPU {g.uuid} has a MIG mode change pending ({g.mig_pending}); "
                "it takes effect after a GPU reset"
            )
        if st.share[g.key] == SHARE_KUBERNETES and g.host_procs:
            procs = ", ".join(
                f"pid {p.get('pid')} ({p.get('name') or '?'})" for p in g.host_procs[:_MAX_LISTED]
            )
            st.warnings.append(
                f"GPU {g.uuid} goes to Kubernetes but runs {len(g.host_procs)} process(es) "
                f"not known to be in a container: {procs}"
            )


def _plan(host, facts, mode, split, mig_strategy, exclude_unhealthy, node_name):
    """Return (plan or None, errors). Never raises for bad input."""
    errors = []
    warnings = []
    host = str(host)
    node = str(node_name) if node_name else host
    if mode not in MODES:
        errors.append(f"{host}: mode {mode!r} is not one of {', '.join(MODES)}")
    if mig_strategy is None:
        mig_strategy = "none"
    if mig_strategy not in MIG_STRATEGIES:
        errors.append(f"{host}: mig_strategy {mig_strategy!r} is not one of {', '.join(MIG_STRATEGIES)}")
    if not isinstance(exclude_unhealthy, bool):
        errors.append(f"{host}: exclude_unhealthy {exclude_unhealthy!r} is not a boolean")
    gpus = _norm_facts(host, facts, errors)
    if errors:
        return None, errors

    st = _Split(host, gpus, mode, mig_strategy, exclude_unhealthy, errors, warnings)
    if mode == "none":
        if split:
            warnings.append("mode none: split is ignored, every GPU stays with the host")
        for g in gpus:
            st.put(g, SHARE_HOST, "mode none")
    else:
        whole_gpu_only = mode in DEVICE_PLUGIN_MODES and mig_strategy == "none"
        sel = _read_split(st, split)
        if sel is None:
            return None, errors
        # order: explicit lists (both sides) -> product -> host_count -> count -> the rest
        _place_explicit(st, sel)
        if not errors and sel["patterns"] is not None:
            _place_product(st, sel)
        if not errors:
            _place_counts(st, sel, whole_gpu_only)
        if errors:
            return None, errors
        _place_rest(st)
        _check_mig(st, whole_gpu_only)
        if mode == "dra":
            _check_dra(st)
        if errors:
            return None, errors
    _final_warnings(st)
    return _assemble(st, node), []


def _empty_plan(host, node, mode, mig_strategy):
    return {
        "host": host,
        "node": node,
        "mode": mode,
        "mig_strategy": mig_strategy,
        "split": False,
        "selector": {"kubernetes": None, "host": None},
        "kubernetes_uuids": [],
        "host_uuids": [],
        "excluded": [],
        "kubernetes_count": 0,
        "host_count": 0,
        "excluded_count": 0,
        "gpu_count": 0,
        "kubernetes_mig_uuids": [],
        "resource_name": GPU_RESOURCE,
        "resources": {GPU_RESOURCE: 0},
        "dra_devices": [],
        "dra_excluded_devices": [],
        "warnings": [],
        "gpus": [],
    }


def _assemble(st, node):
    mode, mig_strategy = st.mode, st.mig_strategy
    plan = _empty_plan(st.host, node, mode, mig_strategy)
    plan["selector"] = {"kubernetes": st.k_sel, "host": st.h_sel}
    kube_uuids, host_uuids, excluded, kube_migs = [], [], [], []
    dra_devices, dra_excluded, out_gpus = [], [], []
    resources = {}
    advertises = mode in DEVICE_PLUGIN_MODES
    for g in st.gpus:
        share = st.share[g.key]
        out_gpus.append(
            {
                "uuid": g.uuid,
                "pci_bus_id": g.pci,
                "index": g.index,
                "minor_number": g.minor,
                "name": g.name,
                "memory_total_mib": g.memory,
                "share": share,
                "health": g.health,
                "mig_enabled": g.mig_enabled,
                "mig_uuids": [m["uuid"] for m in g.migs],
            }
        )
        if share == SHARE_KUBERNETES:
            kube_uuids.append(g.uuid)
            if not advertises:
                continue
            if g.mig_enabled and mig_strategy != "none":
                for m in g.migs:
                    kube_migs.append(m["uuid"])
                    name = GPU_RESOURCE if mig_strategy == "single" else mig_resource_name(m["profile"])
                    resources[name] = resources.get(name, 0) + 1
            else:
                resources[GPU_RESOURCE] = resources.get(GPU_RESOURCE, 0) + 1
        elif share == SHARE_HOST:
            host_uuids.append(g.uuid)
            if mode == "dra":
                dra_devices.append(f"gpu-{g.minor}")
        else:
            excluded.append(
                {"uuid": g.uuid, "pci_bus_id": g.pci, "reason": st.excluded_reason.get(g.key, "")}
            )
            if mode == "dra" and g.minor is not None:
                dra_excluded.append(f"gpu-{g.minor}")
    resources.setdefault(GPU_RESOURCE, 0)
    resources = {k: resources[k] for k in sorted(resources)}
    plan.update(
        {
            "kubernetes_uuids": kube_uuids,
            "host_uuids": host_uuids,
            "excluded": excluded,
            "kubernetes_count": len(kube_uuids),
            "host_count": len(host_uuids),
            "excluded_count": len(excluded),
            "gpu_count": len(st.gpus),
            "kubernetes_mig_uuids": kube_migs,
            "resources": resources,
            "dra_devices": dra_devices,
            "dra_excluded_devices": dra_excluded,
            # gpusplit owns GPU advertising on every planned node that has GPUs: the stock plugin and
            # the operator's plugin stay off it (label gpusplit.io/split=true, see render.node_labels).
            "split": bool(st.gpus),
            "warnings": st.warnings,
            "gpus": out_gpus,
        }
    )
    if mig_strategy == "mixed" and advertises:
        plan["resource_name"] = [k for k, v in resources.items() if v] or [GPU_RESOURCE]
    return plan


def plan_node(host, facts, mode, split, mig_strategy="none", exclude_unhealthy=True, node_name=None):
    """Plan one host. Raises PlanError with every refusal for this host."""
    plan, errors = _plan(host, facts, mode, split, mig_strategy, exclude_unhealthy, node_name)
    if errors:
        raise PlanError(errors)
    return plan


def plan_fleet(hosts):
    """Plan every host; collect the refusals of all hosts before raising one PlanError.

    ``hosts``: {host: {facts, mode, split, mig_strategy?, exclude_unhealthy?, node_name?}}.
    Returns {"nodes": {host: node plan} (sorted by host), "summary": {...}, "warnings": [...]}.
    """
    if not isinstance(hosts, dict):
        raise PlanError([f"fleet: expected a mapping of host -> {{facts, mode, split}}, got {hosts!r}"])
    errors = []
    nodes = {}
    for host in sorted(hosts, key=str):
        entry = hosts[host]
        if not isinstance(entry, dict):
            errors.append(f"{host}: expected a mapping with facts, mode, split; got {entry!r}")
            continue
        unknown = sorted(str(k) for k in entry if k not in FLEET_ENTRY_KEYS)
        if unknown:
            errors.append(
                f"{host}: unknown key(s) {', '.join(unknown)} (allowed: {', '.join(FLEET_ENTRY_KEYS)})"
            )
            continue
        plan, errs = _plan(
            host,
            entry.get("facts"),
            entry.get("mode"),
            entry.get("split"),
            entry.get("mig_strategy", "none"),
            entry.get("exclude_unhealthy", True),
            entry.get("node_name"),
        )
        if errs:
            errors.extend(errs)
        else:
            nodes[str(host)] = plan
    owners = {}
    for host, plan in nodes.items():
        owners.setdefault(plan["node"], []).append(host)
    for node, owner_hosts in sorted(owners.items()):
        if len(owner_hosts) > 1:
            errors.append(
                f"{owner_hosts[0]}: node name {node!r} is also used by {', '.join(owner_hosts[1:])}"
            )
    if errors:
        raise PlanError(errors)
    return {"nodes": nodes, "summary": fleet_summary(nodes), "warnings": fleet_warnings(nodes)}


def fleet_summary(nodes):
    """Totals over {host: node plan}."""
    by_mode = {}
    totals = {"nodes": len(nodes), "gpus": 0, "kubernetes_gpus": 0, "host_gpus": 0, "excluded_gpus": 0}
    for plan in nodes.values():
        by_mode[plan["mode"]] = by_mode.get(plan["mode"], 0) + 1
        totals["gpus"] += plan["gpu_count"]
        totals["kubernetes_gpus"] += plan["kubernetes_count"]
        totals["host_gpus"] += plan["host_count"]
        totals["excluded_gpus"] += plan["excluded_count"]
    totals["by_mode"] = {k: by_mode[k] for k in sorted(by_mode)}
    return totals


def fleet_warnings(nodes):
    """Every node's warnings, prefixed with its host."""
    return [f"{host}: {w}" for host, plan in nodes.items() for w in plan["warnings"]]


# --------------------------------------------------------------------------------------------
# table


def node_plans(plan):
    """The node plans of a fleet plan, a node plan, or a list of node plans (in order)."""
    if isinstance(plan, dict) and isinstance(plan.get("nodes"), dict):
        return list(plan["nodes"].values())
    if isinstance(plan, dict) and "host" in plan and "gpus" in plan:
        return [plan]
    if isinstance(plan, list | tuple):
        return list(plan)
    raise PlanError(
        [f"expected a fleet plan, a node plan or a list of node plans, got {type(plan).__name__}"]
    )


def _share_cell(plan, share):
    buses = [
        short_pci(g["pci_bus_id"]) if g["pci_bus_id"] else "?" for g in plan["gpus"] if g["share"] == share
    ]
    if not buses:
        return "0"
    return f"{len(buses)} ({' '.join(buses)})"


def fleet_table(plan):
    """A fixed-width table: node, mode, host GPUs, Kubernetes GPUs, excluded (count and bus ids)."""
    nodes = node_plans(plan)
    header = ("NODE", "MODE", "HOST GPUS", "KUBERNETES GPUS", "EXCLUDED")
    rows = []
    totals = [0, 0, 0]
    for p in nodes:
        name = p["node"] if p["node"] == p["host"] else f"{p['node']} ({p['host']})"
        rows.append(
            (
                name,
                p["mode"],
                _share_cell(p, SHARE_HOST),
                _share_cell(p, SHARE_KUBERNETES),
                _share_cell(p, SHARE_EXCLUDED),
            )
        )
        totals[0] += p["host_count"]
        totals[1] += p["kubernetes_count"]
        totals[2] += p["excluded_count"]
    footer = (f"TOTAL {len(nodes)} node(s)", "", *(str(t) for t in totals))
    widths = [max(len(r[i]) for r in (header, footer, *rows)) for i in range(len(header))]

    def line(cells):
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

    sep = "  ".join("-" * w for w in widths)
    return "\n".join([line(header), sep, *(line(r) for r in rows), sep, line(footer)])
