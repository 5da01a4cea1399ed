# Copyright: gpusplit contributors
# Apache-2.0
"""Applying a node's MIG geometry on the host (mode device_plugin): what to hand nvidia-mig-parted. Pure.

nvidia-mig-parted selects GPUs by index (the order it enumerates them in), never by UUID. The plan names
the Kubernetes share's GPUs by UUID and carries each GPU's index as this run's facts had it; indices are
not stable (a GPU that falls off the bus, a driver reload, a changed PCI topology renumber them). So,
just before applying, the GPUs are read again on the host and :func:`decide` checks every GPU of the
geometry against the plan: same UUID at the same index, still there, still in the Kubernetes share. A
GPU that moved is refused (the config would repartition whatever GPU now has that index, possibly a
host GPU). A GPU whose geometry changes must have no process on it: a host process stops the run (the
host's work is never stopped by gpusplit); a container's process means a pod still holds it, which the
re-split's policy (refuse, evict, wait) handles on the cluster before this step.

The config lists only the Kubernetes share's GPUs of the geometry (mig_geometry.mig_parted_layout), so
mig-parted never walks a host GPU. :func:`decide` takes the GPUs as read on the host just before the apply
and says what to run, or why not; reading the GPUs and running the tool are the caller's.
"""

from __future__ import annotations

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import type_name
from ansible_collections.gpusplit.k8s.plugins.module_utils._split.mig_geometry import (
    layout_name,
    mig_parted_layout,
)

TOOL = "nvidia-mig-parted"
INSTALL_HINT = (
    "install NVIDIA's nvidia-mig-parted on the host (the release packages or the container image of "
    "https://github.com/NVIDIA/mig-parted, whose README says how) so that it is on the PATH"
)


def missing_tool(host):
    """The refusal where a GPU needs a change and the host has no nvidia-mig-parted."""
    return f"{host}: {TOOL} was not found on the host: {INSTALL_HINT}. Nothing was changed."


def config_document(node_plan):
    """(selected config name, the mig-parted config with only that entry) for ``node_plan``'s geometry."""
    name = layout_name(node_plan["node"])
    return name, {"version": "v1", "mig-configs": {name: mig_parted_layout(node_plan)}}


def _profiles_now(gpu):
    mode = (gpu.get("mig_mode") or {}).get("current")
    if mode != "enabled":
        return None
    return sorted(str(m.get("profile")) for m in gpu.get("mig_devices") or [])


def decide(node_plan, gpus_now):
    """What to apply for ``node_plan`` (a plan node with ``mig_geometry``) given ``gpus_now`` (the GPU facts
    read on the host just now, as nvidia_gpu_facts returns them).

    Returns {"errors": [...], "changes": [{uuid, index, now, want}], "selected": name, "config": document};
    ``changes`` lists the GPUs whose MIG devices differ (empty: nothing to do). Nothing is run here.
    """
    host = node_plan.get("host") or node_plan.get("node")
    if not node_plan.get("mig_geometry"):
        return {"errors": [], "changes": [], "selected": None, "config": None}
    problems = plan_problems(node_plan)
    if problems:
        return {"errors": problems, "changes": [], "selected": None, "config": None}
    geometry = node_plan["mig_geometry"]
    planned = {g["uuid"]: g for g in node_plan.get("gpus") or []}
    now = {g.get("uuid"): g for g in gpus_now or [] if g.get("uuid")}
    errors, changes = [], []
    for uuid in sorted(geometry, key=lambda u: planned.get(u, {}).get("index", -1)):
        want = sorted(geometry[uuid])
        plan_gpu = planned.get(uuid)
        if plan_gpu is None or plan_gpu.get("share") != "kubernetes":
            share = plan_gpu.get("share") if plan_gpu else "no"
            errors.append(
                f"{host}: GPU {uuid} is in the {share} share of the plan; gpusplit applies a MIG geometry to the "
                "Kubernetes share's GPUs only"
            )
            continue
        gpu = now.get(uuid)
        if gpu is None:
            errors.append(
                f"{host}: GPU {uuid} (index {plan_gpu['index']} in the plan) is not on the host any more; run "
                "gpusplit again so that the plan is made from the GPUs there are. Nothing was changed."
            )
            continue
        if gpu.get("index") != plan_gpu["index"]:
            errors.append(
                f"{host}: GPU {uuid} moved from index {plan_gpu['index']} (this run's facts) to index "
                f"{gpu.get('index')}; {TOOL} selects GPUs by index, so the config would partition another GPU. "
                "Run gpusplit again so that the plan takes the new indices. Nothing was changed."
            )
            continue
        have = _profiles_now(gpu)
        if have == want:
            continue
        procs = gpu.get("processes") or []
        on_host = [p for p in procs if not p.get("in_container")]
        if on_host:
            listed = ", ".join(f"pid {p.get('pid')} ({p.get('name') or '?'})" for p in on_host)
            errors.append(
                f"{host}: GPU {uuid} runs host process(es) {listed}; changing its MIG geometry needs every process "
                "on it gone, and gpusplit never stops the host's work: stop them, then run gpusplit again. "
                "Nothing was changed."
            )
            continue
        if procs:
            listed = ", ".join(f"pid {p.get('pid')}" for p in procs)
            errors.append(
                f"{host}: GPU {uuid} is still in use by container process(es) {listed}: a pod holds it. "
                "gpusplit_resplit_policy decides what happens to such pods (refuse, evict, wait) before the "
                "geometry is applied. Nothing was changed."
            )
            continue
        changes.append(
            {
                "uuid": uuid,
                "index": gpu["index"],
                "now": "MIG disabled" if have is None else have,
                "want": want,
            }
        )
    selected, document = config_document(node_plan) if geometry else (None, None)
    return {
        "errors": errors,
        "changes": changes if not errors else [],
        "selected": selected,
        "config": document,
    }


def plan_problems(plan):
    """What makes ``plan`` unusable here (a node of fleet_plan is expected), as messages; [] when it is fine."""
    problems = []
    geometry = plan.get("mig_geometry")
    if not isinstance(geometry, dict) or not all(
        isinstance(u, str) and isinstance(ps, list) and all(isinstance(p, str) for p in ps)
        for u, ps in geometry.items()
    ):
        problems.append(
            f"plan.mig_geometry: expected a mapping of GPU UUID to a list of MIG profiles, got {type_name(geometry)}"
        )
    gpus = plan.get("gpus")
    if not isinstance(gpus, list) or not all(
        isinstance(g, dict) and isinstance(g.get("uuid"), str) and isinstance(g.get("index"), int)
        for g in gpus
    ):
        problems.append(
            "plan.gpus: expected the plan's list of GPUs, each with uuid and index (give fleet_plan's nodes[<host>])"
        )
    if not isinstance(plan.get("node"), str) or not plan.get("node"):
        problems.append("plan.node: expected the node's name (give fleet_plan's nodes[<host>])")
    return problems
