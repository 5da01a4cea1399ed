# Copyright: gpusplit contributors
# Apache-2.0
"""The ResourceSlices the DRA driver publishes, read and compared with the plan. Private to the collection.

A rule names a device by ``gpu-<minor>``, so the UUID the driver publishes under that name must
be the planned one (``check_published``); a MIG-enabled GPU is published as its MIG devices,
found by their ``parentUUID`` (``published_mig_devices``).
"""

from __future__ import annotations

from ansible_collections.gpusplit.k8s.plugins.module_utils._dra.names import (
    DRIVER,
    device_name,
    dra_node_plans,
)


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
