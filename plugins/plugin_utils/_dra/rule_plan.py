# Copyright: gpusplit contributors
# Apache-2.0
"""gpusplit's DeviceTaintRules: one per reserved or isolated device. Private to the collection.

What each rule says (``taint_rule_context``: name, labels, annotations, device, taint), for the
host share and the excluded GPUs of a plan (``host_share_rule_contexts``) and for an isolated GPU
(``isolation_rule_contexts``); finding gpusplit's live rules of a GPU (``rules_of_gpu``) and a
table of rules (``rules_table``). The objects are rendered from templates/devicetaintrule.yaml.j2
by ``render.py`` in this package; everything that decides is here.
"""

from __future__ import annotations

from ansible_collections.gpusplit.k8s.plugins.module_utils._dra.names import (
    ANNOTATION_PCI,
    ANNOTATION_REASON,
    ANNOTATION_UUID,
    DRIVER,
    EFFECTS,
    LABEL_PURPOSE,
    PURPOSES,
    DraError,
    check_purpose,
    device_name,
    dra_node_plans,
    taint_rule_name,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.names import (
    ANNOTATION_HOST,
    LABEL_MANAGED_BY,
    LABEL_NAME,
    LABEL_NODE,
    MANAGED_BY,
    label_value,
)
from ansible_collections.gpusplit.k8s.plugins.plugin_utils._dra.isolation import norm_uuid
from ansible_collections.gpusplit.k8s.plugins.plugin_utils._dra.published import (
    published_devices,
    published_mig_devices,
)


def check_effect(effect):
    """Refuse a taint effect that is not one of EFFECTS."""
    if effect not in EFFECTS:
        raise DraError(f"taint effect {effect!r} is not one of {', '.join(EFFECTS)}")


def taint_rule_context(
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
    """What one DeviceTaintRule naming ``driver``/``pool=node``/``device`` says, with gpusplit's labels.

    The context of templates/devicetaintrule.yaml.j2: name, labels, annotations, driver, pool,
    device, key, value, effect.
    """
    check_effect(effect)
    check_purpose(purpose)
    _unused, app_name, key = PURPOSES[purpose]
    labels = {
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_NAME: app_name,
        LABEL_PURPOSE: purpose,
        LABEL_NODE: label_value(node),
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
    return {
        "name": taint_rule_name(purpose, node, device),
        "labels": labels,
        "annotations": annotations,
        "driver": driver,
        "pool": str(node),
        "device": str(device),
        "key": key,
        "value": label_value(value) if value else "",
        "effect": effect,
    }


def host_share_rule_contexts(plan, effect="NoSchedule", slices=None):
    """One DeviceTaintRule (its context) per reserved device of every node in mode dra, sorted by name.

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
                    taint_rule_context(
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
        name = rule["name"]
        if name in names:
            errors.append(f"DeviceTaintRule name {name} is rendered twice ({names[name]})")
        names[name] = rule["pool"]
    if errors:
        raise DraError(errors)
    return sorted(rules, key=lambda r: r["name"])


def isolation_rule_context(located, effect="None", reason=None, device=None):
    """The DeviceTaintRule (its context) isolating one GPU (see ``locate_gpu``); effect None reports only.

    ``device`` names another published device of that GPU (one of its MIG devices).
    """
    if located.get("minor_number") is None:
        raise DraError(
            f"{located.get('host')}: GPU {located.get('uuid')} has no minor number, "
            "so its DRA device name gpu-<minor> is unknown"
        )
    reason = reason or "isolated"
    return taint_rule_context(
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


def isolation_rule_contexts(located, effect="None", reason=None, slices=None):
    """Every DeviceTaintRule (its context) that isolates one GPU: its ``gpu-<minor>`` device, and for a
    MIG-enabled GPU each MIG device the driver publishes for it (``slices``: the node's live ResourceSlices).

    Refuses a MIG-enabled GPU none of whose MIG devices is published: a rule on ``gpu-<minor>``
    alone would select nothing, and the controller would report 0 devices. A lost GPU gets no
    rule (empty list): the driver does not publish it, so no claim can be given it.
    """
    if located.get("health") == "lost":
        return []
    rules = [isolation_rule_context(located, effect, reason)]
    if located.get("mig_enabled"):
        migs = published_mig_devices(published_devices(slices), located["node"], located.get("uuid"))
        if not migs:
            raise DraError(
                f"{located.get('host')}: GPU {located.get('uuid')} has MIG enabled, and node {located['node']} "
                "publishes none of its MIG devices (is the DRA driver running there?); nothing was changed"
            )
        rules += [isolation_rule_context(located, effect, reason, device=m) for m in migs]
    return rules


def rules_of_gpu(rules, uuid, purpose="isolate"):
    """The names of the live gpusplit DeviceTaintRules of ``purpose`` that name GPU ``uuid`` (annotation)."""
    check_purpose(purpose)
    want = norm_uuid(uuid)
    names = []
    for rule in rules or []:
        meta = rule.get("metadata") or {}
        labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
        if labels.get(LABEL_MANAGED_BY) != MANAGED_BY or labels.get(LABEL_PURPOSE) != purpose:
            continue
        if norm_uuid(annotations.get(ANNOTATION_UUID)) == want and want:
            names.append(meta.get("name"))
    return sorted(names)


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
        "  ".join(row[i].ljust(widths[i]) for i in range(len(header))).rstrip() for row in [header, *rows]
    ]
    lines.append(f"{len(rows)} DeviceTaintRule(s)")
    return "\n".join(lines)
