# Copyright: gpusplit contributors
# Apache-2.0
"""The selectors of a host's ``split``: which GPUs each key names. Private to the collection.

``split`` names exactly one selector for the Kubernetes share, or one for the host share (or
one of each). :func:`read_split` validates the mapping and resolves the explicit lists (UUIDs,
MIG UUIDs, PCI bus ids, indices), the counts and the product patterns against the host's
:class:`~.inputs.Gpu` records. Problems are appended to ``errors``; nothing is raised here.
"""

from __future__ import annotations

import fnmatch

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import type_name
from ansible_collections.gpusplit.k8s.plugins.module_utils._gpu.ids import (
    normalize_pci_bus_id,
    normalize_uuid,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._split.inputs import fmt_list, int_or_none

KUBERNETES_SELECTORS = ("count", "uuids", "pci_bus_ids", "indices", "product")
HOST_SELECTORS = ("host_count", "host_uuids", "host_pci_bus_ids", "host_indices")
SPLIT_KEYS = KUBERNETES_SELECTORS + HOST_SELECTORS


def _as_value_list(host, key, value, errors):
    if isinstance(value, str):
        values = [v for v in (part.strip() for part in value.split(",")) if v]
    elif isinstance(value, (list, tuple)):
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
        named = [m["uuid"] for _unused, ms in picks.values() for m in ms]
        what = "is a MIG device" if len(named) == 1 else "are MIG devices"
        errors.append(f"{host}: split.{key}: {fmt_list(named)} {what}; {mig_refusal}")
        return None
    out = []
    for parent, named in picks.values():
        names = {m["uuid"] for m in named}
        missing = [m for m in parent.migs if m["uuid"] not in names]
        if missing:
            errors.append(
                f"{host}: split.{key} names {len(names)} of the {len(parent.migs)} MIG devices of GPU "
                f"{parent.describe()} ({fmt_list(sorted(names))}); a device plugin that sees the GPU "
                f"advertises all of them, so {fmt_list(m['uuid'] for m in missing)} would go to the "
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
                known = fmt_list(m["uuid"] for g in gpus for m in g.migs)
                errors.append(
                    f"{host}: split.{key}: unknown MIG device UUID {raw!r} (MIG devices on this host: {known})"
                )
            else:
                known = fmt_list(g.uuid for g in gpus)
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


def _pick_each(host, key, values, by, parse, what, known, errors):
    """The GPUs that ``values`` name, through ``parse`` (raw -> key of ``by``, None when it is no
    such value); None after a refusal. ``what``: (what a value must be, what an unknown one is)."""
    out = []
    ok = True
    for raw in values:
        parsed = parse(raw)
        if parsed is None:
            errors.append(f"{host}: split.{key}: {raw!r} is not {what[0]}")
            ok = False
        elif parsed not in by:
            errors.append(f"{host}: split.{key}: unknown {what[1]} {raw!r} (this host has: {known})")
            ok = False
        else:
            out.append(by[parsed])
    return out if ok else None


def _resolve_pci(host, key, value, gpus, errors, warnings):
    values = _as_value_list(host, key, value, errors)
    if values is None:
        return None
    what = ("a PCI bus id (expected e.g. 00000000:17:00.0)", "PCI bus id")
    known = fmt_list(g.pci for g in gpus)
    out = _pick_each(host, key, values, {g.pci: g for g in gpus}, normalize_pci_bus_id, what, known, errors)
    return None if out is None else _dedupe(key, out, warnings)


def _resolve_indices(host, key, value, gpus, errors, warnings):
    if isinstance(value, int) and not isinstance(value, bool):
        value = [value]
    values = _as_value_list(host, key, value, errors)
    if values is None:
        return None
    by_index = {g.index: g for g in gpus if g.index is not None}
    what = ("a GPU index", "GPU index")
    out = _pick_each(host, key, values, by_index, int_or_none, what, fmt_list(sorted(by_index)), errors)
    if out is None:
        return None
    out = _dedupe(key, out, warnings)
    stable = key.replace("indices", "uuids")
    warnings.append(
        f"split.{key}: NVML indices are not stable across reboots; today they are "
        f"{fmt_list(g.uuid for g in out)} - prefer split.{stable}"
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
    count = int_or_none(value)
    if count is None or count < 0:
        errors.append(f"{host}: split.{key}: {value!r} is not a whole number >= 0")
        return None
    return count


def _product_patterns(host, value, errors):
    if isinstance(value, str):
        patterns = [value]
    elif isinstance(value, (list, tuple)) and value and all(isinstance(v, str) for v in value):
        patterns = list(value)
    else:
        errors.append(f"{host}: split.product: expected a product name or glob, got {value!r}")
        return None
    patterns = [p.strip().lower() for p in patterns]
    if not all(patterns):
        errors.append(f"{host}: split.product: empty product name in {value!r}")
        return None
    return patterns


def product_matches(name, patterns):
    """The product ``name`` equals one of the (lower-case) ``patterns`` or matches it as a glob."""
    low = name.lower()
    return any(low == p or fnmatch.fnmatchcase(low, p) for p in patterns)


def read_split(host, split, gpus, errors, warnings, mig_refusal=None):
    """Validate the split mapping; return the parsed selections or None on error.

    ``mig_refusal``: why MIG devices cannot be named on this host, or None when they can.
    Returns {k_sel, h_sel (the selector keys or None), k_explicit, h_explicit (GPU lists),
    k_count, h_count, patterns, product}.
    """
    if split is None:
        split = {}
    if not isinstance(split, dict):
        errors.append(
            f"{host}: split (gpusplit_split): expected a mapping of one selector to its value, e.g. "
            f"{{count: 2}} or {{host_uuids: [GPU-...]}}, got {type_name(split)} {split!r}"
        )
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
    k_sel = k_keys[0] if k_keys else None
    h_sel = h_keys[0] if h_keys else None
    sel = {
        "k_sel": k_sel,
        "h_sel": h_sel,
        "k_explicit": None,
        "h_explicit": None,
        "k_count": None,
        "h_count": None,
        "patterns": None,
    }
    for side, key in (("k_explicit", k_sel), ("h_explicit", h_sel)):
        if key in _RESOLVERS:
            extra = {"mig_refusal": mig_refusal} if key.endswith("uuids") else {}
            sel[side] = _RESOLVERS[key](host, key, split[key], gpus, errors, warnings, **extra)
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
