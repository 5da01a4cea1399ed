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

import json
import posixpath

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError, type_name
from ansible_collections.gpusplit.k8s.plugins.module_utils._split.mig_geometry import (
    layout_name,
    mig_parted_layout,
)
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.split_render import render_split_daemonset

TOOL = "nvidia-mig-parted"
INSTALL_HINT = (
    "install NVIDIA's nvidia-mig-parted on the host (the release packages or the container image of "
    "https://github.com/NVIDIA/mig-parted, whose README says how) so that it is on the PATH"
)


# gpusplit's own mig-parted config on the host, and the drop-in that makes nvidia-mig-manager.service (the
# systemd service of mig-parted's deployments/systemd, which applies its selected config at boot) apply it
CONFIG_PATH = "/etc/gpusplit/mig-parted.yaml"
SERVICE = "nvidia-mig-manager.service"
# systemd applies a unit's drop-ins in the order of their names, the last assignment of a variable winning: the
# name sorts after the package's override.conf, whose MIG_PARTED_SELECTED_CONFIG (all-disabled) it must replace
PACKAGE_DROPIN = "override.conf"
DROPIN_PATH = f"/etc/systemd/system/{SERVICE}.d/zz-gpusplit.conf"


class MigApplyError(GpusplitError):
    """The MIG apply refused: the GPUs read just before it, the plan, or the processes on them."""

    title = "MIG geometry"


def missing_tool(host):
    """The refusal where a GPU needs a change and the host has no nvidia-mig-parted."""
    return f"{host}: {TOOL} was not found on the host: {INSTALL_HINT}. Nothing was changed."


def config_document(node_plan):
    """(selected config name, the mig-parted config with only that entry) for ``node_plan``'s geometry."""
    name = layout_name(node_plan["node"])
    return name, {"version": "v1", "mig-configs": {name: mig_parted_layout(node_plan)}}


def config_text(document):
    """The text of the config file: JSON, which is YAML too (mig-parted reads its config as YAML)."""
    return json.dumps(document, indent=2, sort_keys=True) + "\n"


def dropin_text(selected, config_path=CONFIG_PATH):
    """The drop-in of nvidia-mig-manager.service: the variables of nvidia-mig-parted's -f and -c flags
    (MIG_PARTED_CONFIG_FILE, MIG_PARTED_SELECTED_CONFIG), so the service applies this config at boot."""
    return (
        "# gpusplit: the MIG geometry of this node's Kubernetes share (gpusplit_mig_geometry); the host's GPUs\n"
        "# are in no entry of the config, so nvidia-mig-parted leaves them alone\n"
        "[Service]\n"
        f'Environment="MIG_PARTED_CONFIG_FILE={config_path}"\n'
        f'Environment="MIG_PARTED_SELECTED_CONFIG={selected}"\n'
    )


def host_step(node_plan, gpus_now, root="/", plugin_settings=None):
    """What gpu_host's entry point mig does on the host of ``node_plan``: ``gpus_to_change`` (decide's changes,
    empty: nothing to run), the files to keep there (``config_path``/``config_text``, ``dropin_path``/
    ``dropin_text``, under ``root``), the ``argv`` of the apply, ``missing_tool`` (the refusal where the host
    lacks it) and the node's split plugin pods (``plugin_namespace``, ``plugin_selector``: restarted after the
    apply, since the plugin lists its devices when it starts). Raises MigApplyError with every refusal of
    :func:`decide`."""
    if not isinstance(node_plan, dict):
        raise MigApplyError(
            f"plan: expected the node's plan (fleet_plan's nodes[<host>]), got {type_name(node_plan)}"
        )
    if not isinstance(gpus_now, list):
        raise MigApplyError(f"gpus: expected the GPUs read on the host (a list), got {type_name(gpus_now)}")
    if not isinstance(root, str) or not root.startswith("/"):
        raise MigApplyError(f"root (gpusplit_host_root): expected an absolute path, got {root!r}")
    got = decide(node_plan, gpus_now)
    if got["errors"]:
        raise MigApplyError(got["errors"])
    if got["config"] is None:
        return {"gpus_to_change": [], "config_path": None, "argv": []}
    config_path = posixpath.join(root, CONFIG_PATH.lstrip("/"))
    host = node_plan.get("host") or node_plan["node"]
    daemonset = render_split_daemonset(node_plan, plugin_settings)
    labels = daemonset["spec"]["selector"]["matchLabels"]
    return {
        "plugin_namespace": daemonset["metadata"]["namespace"],
        "plugin_selector": ",".join(f"{k}={labels[k]}" for k in sorted(labels)),
        "gpus_to_change": got["changes"],
        "selected": got["selected"],
        "config_path": config_path,
        "config_text": config_text(got["config"]),
        "dropin_path": posixpath.join(root, DROPIN_PATH.lstrip("/")),
        "dirs": [posixpath.join(root, posixpath.dirname(p).lstrip("/")) for p in (CONFIG_PATH, DROPIN_PATH)],
        "dropin_text": dropin_text(got["selected"]),
        "argv": [TOOL, "apply", "-f", config_path, "-c", got["selected"]],
        "missing_tool": missing_tool(host),
        "lines": [
            f"{host}: GPU {c['index']} ({c['uuid']}): "
            f"{'MIG disabled' if c['now'] == 'MIG disabled' else '[' + ', '.join(c['now']) + ']'} -> "
            f"[{', '.join(c['want'])}]"
            for c in got["changes"]
        ],
    }


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
