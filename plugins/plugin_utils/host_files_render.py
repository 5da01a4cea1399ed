# Copyright: gpusplit contributors
# Apache-2.0
"""Pure rendering of the host side of a node's GPU split.

From one node plan (``_split/planner.plan_node``) this renders the texts the role ``gpu_host`` writes:

* ``/etc/gpusplit/host-gpus.env``: ``KEY=VALUE`` lines (usable as a systemd ``EnvironmentFile=``
  and by ``set -a; . host-gpus.env``) naming the host's GPUs and Kubernetes' GPUs by UUID;
* ``/etc/systemd/system/<unit>.d/50-gpusplit.conf`` for every host service named in the inventory:
  ``[Service]`` with ``Environment=CUDA_VISIBLE_DEVICES=<host UUIDs>`` (plus
  ``NVIDIA_VISIBLE_DEVICES`` and ``CUDA_DEVICE_ORDER=PCI_BUS_ID``), so the service's CUDA processes
  see exactly the host share.

The host share is in PCI bus order. When it is empty ``CUDA_VISIBLE_DEVICES`` is set to the empty
string, which hides every GPU from CUDA (the host keeps no GPU), and ``NVIDIA_VISIBLE_DEVICES`` to
``none`` (the container toolkit's word for "no GPU"; its empty value means "not set"). Every file
starts with :data:`MARKER`, so the role removes only drop-ins it wrote. See docs/hardening.md.

No I/O and no Ansible imports; every refusal raises :class:`HostShareError` naming the host.
"""

from __future__ import annotations

import posixpath
import re

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError, type_name
from ansible_collections.gpusplit.k8s.plugins.module_utils._gpu.ids import (
    normalize_pci_bus_id,
    normalize_uuid,
    pci_sort_key,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._host.host_files_record import STATE_NAME
from ansible_collections.gpusplit.k8s.plugins.module_utils._split.modes import SHARE_NONE, get_mode

MARKER = "# Managed by gpusplit (gpusplit.k8s.gpu_host)."
DROPIN_NAME = "50-gpusplit.conf"
SYSTEMD_DIR = "etc/systemd/system"
ENV_DIR = "etc/gpusplit"
ENV_NAME = "host-gpus.env"
CUDA_DEVICE_ORDER = "PCI_BUS_ID"
NVIDIA_NONE = "none"
REQUIRED_PLAN_KEYS = ("host_uuids", "kubernetes_uuids", "mode")

# systemd unit types (systemd.unit(5)); a name without one of them gets ".service", as systemctl does
UNIT_SUFFIXES = (
    "service",
    "socket",
    "device",
    "mount",
    "automount",
    "swap",
    "target",
    "path",
    "timer",
    "slice",
    "scope",
)
_UNIT_RE = re.compile(r"^[A-Za-z0-9:_.\\@-]+$")
_UUID_RE = re.compile(r"^(GPU|MIG)-[0-9A-Za-z][0-9A-Za-z/-]*$")
_SAFE_VALUE = re.compile(r"^[A-Za-z0-9_.,:/@+-]*$")


class HostShareError(GpusplitError):
    """The node plan or the service list cannot be rendered; ``errors`` holds every message."""


def unit_name(name):
    """Normalise a systemd unit name (``trainer`` -> ``trainer.service``); None if invalid."""
    if not isinstance(name, str):
        return None
    name = name.strip()
    if not name or len(name) > 255 or name.startswith(".") or not _UNIT_RE.match(name):
        return None
    if "." in name and name.rsplit(".", 1)[1] in UNIT_SUFFIXES:
        base = name.rsplit(".", 1)[0]
        return name if base else None
    return name + ".service"


def _uuid_list(host, key, value, errors):
    if not isinstance(value, list | tuple):
        errors.append(f"{host}: node plan: {key} must be a list of GPU UUIDs, got {value!r}")
        return []
    out = []
    for item in value:
        norm = normalize_uuid(item) if isinstance(item, str) else None
        if norm is None or not _UUID_RE.match(norm):
            errors.append(f"{host}: node plan: {key} holds {item!r}, not a GPU UUID")
            continue
        if norm in out:
            errors.append(f"{host}: node plan: {key} names {norm} twice")
            continue
        out.append(norm)
    return out


def _pci_order(plan, uuids):
    """Sort ``uuids`` by the PCI bus id the plan's ``gpus`` give them (keep order when unknown)."""
    pci = {}
    for g in plan.get("gpus") or []:
        if isinstance(g, dict) and isinstance(g.get("uuid"), str):
            bus = normalize_pci_bus_id(g.get("pci_bus_id"))
            if bus is not None:
                pci[normalize_uuid(g["uuid"])] = bus
    if not all(u in pci for u in uuids):
        return list(uuids)
    return sorted(uuids, key=lambda u: pci_sort_key(pci[u]))


def _env_value(host, key, value, errors):
    """A value safe for both a systemd EnvironmentFile= and a POSIX shell."""
    if _SAFE_VALUE.match(value):
        return value
    if "'" in value or "\n" in value or "\\" in value or "%" in value:
        errors.append(f"{host}: cannot write {key}={value!r} safely")
        return ""
    return f"'{value}'"


def _joined(uuids):
    return ",".join(uuids)


def host_files(plan, services=None, root="/"):
    """Render the host share of one node plan.

    ``services``: systemd unit names that get the drop-in. ``root``: where the host's ``/`` is
    (a scratch directory in tests). Returns a dict with the shares, the texts and the paths::

        {root, host, node, mode, host_uuids, kubernetes_uuids, excluded_uuids,
         cuda_visible_devices, nvidia_visible_devices, env_dir, env_path, env_text,
         systemd_dir, dropin_name, dropin_text, dropins: [{unit, dir, path}], marker, warnings}
    """
    errors = []
    if not isinstance(plan, dict):
        raise HostShareError([f"node plan: expected a mapping, got {type_name(plan)}"])
    host = str(plan.get("host") or "?")
    missing = [k for k in REQUIRED_PLAN_KEYS if k not in plan]
    if missing:
        raise HostShareError(
            [f"{host}: node plan: missing key(s) {', '.join(missing)} (pass the planner's node plan)"]
        )
    mode = plan["mode"]
    info = None
    try:
        info = get_mode(mode, where=f"{host}: node plan")
    except GpusplitError as exc:
        errors.extend(exc.errors)
    host_uuids = _uuid_list(host, "host_uuids", plan["host_uuids"], errors)
    kube_uuids = _uuid_list(host, "kubernetes_uuids", plan["kubernetes_uuids"], errors)
    excluded = []
    for item in plan.get("excluded") or []:
        uuid = item.get("uuid") if isinstance(item, dict) else item
        if isinstance(uuid, str):
            excluded.append(normalize_uuid(uuid))
    both = sorted(set(host_uuids) & set(kube_uuids))
    if both:
        errors.append(f"{host}: node plan: {', '.join(both)} in both the host and the Kubernetes share")
    if info is not None and info.kubernetes_share == SHARE_NONE and kube_uuids:
        errors.append(f"{host}: node plan: mode {mode} gives Kubernetes no GPU, but kubernetes_uuids is set")

    if services is None:
        services = []
    if isinstance(services, str) or not isinstance(services, list | tuple):
        errors.append(
            f"{host}: gpusplit_host_services must be a list of systemd unit names, got {services!r}"
        )
        services = []
    units = []
    for name in services:
        unit = unit_name(name)
        if unit is None:
            errors.append(f"{host}: gpusplit_host_services: {name!r} is not a systemd unit name")
        elif unit not in units:
            units.append(unit)

    if not isinstance(root, str) or not root.startswith("/"):
        errors.append(f"{host}: gpusplit_host_root must be an absolute path, got {root!r}")
        root = "/"
    root = posixpath.normpath(root)
    if root.startswith("//"):
        root = "/" + root.lstrip("/")
    if errors:
        raise HostShareError(errors)

    host_uuids = _pci_order(plan, host_uuids)
    kube_uuids = _pci_order(plan, kube_uuids)
    node = str(plan.get("node") or host)
    cuda = _joined(host_uuids)
    nvidia = cuda if host_uuids else NVIDIA_NONE

    warnings = []
    mig_host = [
        normalize_uuid(g["uuid"])
        for g in plan.get("gpus") or []
        if isinstance(g, dict)
        and g.get("mig_enabled")
        and isinstance(g.get("uuid"), str)
        and normalize_uuid(g["uuid"]) in host_uuids
    ]
    if mig_host:
        warnings.append(
            f"host GPU(s) {', '.join(mig_host)} have MIG enabled: CUDA_VISIBLE_DEVICES names the whole GPU; "
            "a CUDA process uses one MIG device, name MIG-<uuid> in the service when it needs a given one"
        )

    summary = (
        f"# node {node}, mode {mode}: {len(host_uuids)} GPU(s) for the host, "
        f"{len(kube_uuids)} for Kubernetes, {len(excluded)} excluded."
    )
    env_lines = [
        MARKER,
        "# The GPUs of this host, split between its own processes and Kubernetes. Do not edit: the next",
        "# run rewrites this file. Use it as a systemd EnvironmentFile= or: set -a; . <this file>; set +a",
        "# An empty CUDA_VISIBLE_DEVICES hides every GPU from CUDA: the host keeps none.",
        summary,
        f"GPUSPLIT_NODE={_env_value(host, 'GPUSPLIT_NODE', node, errors)}",
        f"GPUSPLIT_MODE={mode}",
        f"GPUSPLIT_HOST_GPUS={_joined(host_uuids)}",
        f"GPUSPLIT_KUBERNETES_GPUS={_joined(kube_uuids)}",
        f"GPUSPLIT_EXCLUDED_GPUS={_joined(excluded)}",
        f"CUDA_DEVICE_ORDER={CUDA_DEVICE_ORDER}",
        f"CUDA_VISIBLE_DEVICES={cuda}",
        f"NVIDIA_VISIBLE_DEVICES={nvidia}",
    ]
    if errors:
        raise HostShareError(errors)
    dropin_lines = [
        MARKER,
        "# Gives this service the host's share of the GPUs only (by UUID, in PCI bus order). Do not edit:",
        "# the next run rewrites it; take the unit out of gpusplit_host_services to remove it.",
        "# Takes effect when the service restarts.",
        summary,
        "[Service]",
        f"Environment=CUDA_DEVICE_ORDER={CUDA_DEVICE_ORDER}",
        f"Environment=CUDA_VISIBLE_DEVICES={cuda}",
        f"Environment=NVIDIA_VISIBLE_DEVICES={nvidia}",
    ]

    systemd_dir = posixpath.join(root, SYSTEMD_DIR)
    env_dir = posixpath.join(root, ENV_DIR)
    dropins = []
    for unit in units:
        directory = posixpath.join(systemd_dir, f"{unit}.d")
        dropins.append({"unit": unit, "dir": directory, "path": posixpath.join(directory, DROPIN_NAME)})
    return {
        "root": root,
        "host": host,
        "node": node,
        "mode": mode,
        "host_uuids": host_uuids,
        "kubernetes_uuids": kube_uuids,
        "excluded_uuids": excluded,
        "cuda_visible_devices": cuda,
        "nvidia_visible_devices": nvidia,
        "env_dir": env_dir,
        "env_path": posixpath.join(env_dir, ENV_NAME),
        "env_text": "\n".join(env_lines) + "\n",
        # what gpu_host_files left here last (module_utils/_host/host_files_record.py)
        "state_path": posixpath.join(env_dir, STATE_NAME),
        "systemd_dir": systemd_dir,
        "dropin_name": DROPIN_NAME,
        "dropin_text": "\n".join(dropin_lines) + "\n",
        "dropins": dropins,
        "marker": MARKER,
        "marker_regex": "^" + re.escape(MARKER),
        "warnings": warnings,
    }


def stale_dropins(found_paths, share):
    """Of the managed drop-ins found on the host, those whose unit is no longer listed."""
    keep = {d["path"] for d in share["dropins"]}
    return sorted(p for p in found_paths if p not in keep)
