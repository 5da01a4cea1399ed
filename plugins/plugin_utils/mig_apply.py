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

import base64
import binascii
import json
import posixpath
import shlex

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
DROPIN_NAME = "zz-gpusplit.conf"
DROPIN_DIR = f"/etc/systemd/system/{SERVICE}.d"
DROPIN_PATH = f"{DROPIN_DIR}/{DROPIN_NAME}"
# the selection nvidia-mig-manager.service applies at boot, and the package's own (every GPU without MIG)
SELECTED_VARIABLE = "MIG_PARTED_SELECTED_CONFIG"
PACKAGE_SELECTION = "all-disabled"
# systemd's unit folders, an earlier one hiding a file of the same name in a later one (systemd.unit(5))
UNIT_DIRS = ("/etc/systemd/system", "/run/systemd/system", "/usr/lib/systemd/system", "/lib/systemd/system")
# prints each existing unit file and drop-in of the service ($1) below the folders given after it: its path on
# one line, its bytes in base64 on the next (a read: the role runs it in check mode too)
READ_UNIT_SCRIPT = (
    'service=$1; shift; for d in "$@"; do for f in "$d/$service" "$d/$service.d/"*.conf; do '
    '[ -f "$f" ] || continue; printf \'%s\\n\' "$f"; base64 < "$f" | tr -d \'\\n\'; echo; done; done'
)


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
    ``dropin_text``, under ``root``), ``unit_read_argv`` (what reads the service's own files for :func:`boot_check`),
    the ``argv`` of the apply, ``missing_tool`` (the refusal where the host lacks it) and the node's split plugin
    pods (``plugin_namespace``, ``plugin_selector``: restarted after the
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
    config_path = under(root, CONFIG_PATH)
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
        "dropin_path": under(root, DROPIN_PATH),
        "dirs": [under(root, posixpath.dirname(p)) for p in (CONFIG_PATH, DROPIN_PATH)],
        "dropin_text": dropin_text(got["selected"]),
        "unit_read_argv": read_unit_argv(root),
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


def under(root, path):
    """``path`` of the host below ``root`` (gpusplit_host_root)."""
    return posixpath.join(root, path.lstrip("/"))


def _host_path(root, path):
    """``path`` as found below ``root``, as the host sees it (None where it is not below root)."""
    base = root.rstrip("/")
    if not base:
        return path
    return path[len(base) :] if path.startswith(base + "/") else None


def read_unit_argv(root="/"):
    """The command that prints the service's unit files and drop-ins below ``root`` (READ_UNIT_SCRIPT)."""
    return ["sh", "-c", READ_UNIT_SCRIPT, "sh", SERVICE, *(under(root, d) for d in UNIT_DIRS)]


def parse_unit_read(stdout):
    """[{path, text}] from the output of :func:`read_unit_argv`'s command; a line that is not base64 is refused."""
    lines = [line for line in str(stdout or "").splitlines() if line.strip()]
    if len(lines) % 2:
        raise MigApplyError(
            f"reading {SERVICE}'s files: expected a path and its base64 on two lines each, got {len(lines)} lines"
        )
    files = []
    for path, data in zip(lines[::2], lines[1::2], strict=True):
        try:
            text = base64.b64decode(data.strip(), validate=True).decode("utf-8", errors="replace")
        except (binascii.Error, ValueError):
            raise MigApplyError(f"reading {SERVICE}'s files: {path}: its content is not base64") from None
        files.append({"path": path, "text": text})
    return files


def unit_files_in_order(files, root="/"):
    """The host's own files of nvidia-mig-manager.service in the order systemd reads them: the unit file (the one
    in the first of UNIT_DIRS that has it), then its ``*.conf`` drop-ins by name, a name in an earlier folder hiding
    the same name in a later one; gpusplit's own drop-in is left out. ``files``: [{path, text}] below ``root``."""
    unit, dropins = None, {}
    for item in files:
        path = _host_path(root, item["path"])
        if path is None:
            continue
        folder, name = posixpath.split(path)
        if name == SERVICE and folder in UNIT_DIRS:
            rank = UNIT_DIRS.index(folder)
            if unit is None or rank < unit[0]:
                unit = (rank, path, item["text"])
        elif name.endswith(".conf") and name != DROPIN_NAME and folder.endswith(f"/{SERVICE}.d"):
            parent = folder[: -len(f"/{SERVICE}.d")]
            if parent in UNIT_DIRS:
                rank = UNIT_DIRS.index(parent)
                if name not in dropins or rank < dropins[name][0]:
                    dropins[name] = (rank, path, item["text"])
    ordered = [unit] if unit else []
    ordered.extend(dropins[name] for name in sorted(dropins))
    return [{"path": path, "text": text} for _rank, path, text in ordered]


def environment_assignments(text):
    """The ``Environment=`` assignments of a unit file's [Service] section, in order, as (name, value); an empty
    ``Environment=`` as (None, None), since it resets every assignment before it (systemd.exec(5))."""
    section, out = None, []
    for raw in str(text).splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1].strip()
            continue
        key, sep, value = line.partition("=")
        if section != "Service" or not sep or key.strip() != "Environment":
            continue
        if not value.strip():
            out.append((None, None))
            continue
        try:
            words = shlex.split(value)
        except ValueError:  # an unbalanced quote: its words as they stand
            words = value.split()
        out.extend((name, val) for name, eq, val in (w.partition("=") for w in words) if eq)
    return out


def boot_selection(files, root="/"):
    """``(config, path)``: the MIG config the host's own files of nvidia-mig-manager.service select at boot
    (MIG_PARTED_SELECTED_CONFIG, the last assignment winning) and the file that sets it; (None, None) where none."""
    selected = where = None
    for item in unit_files_in_order(files, root):
        for name, value in environment_assignments(item["text"]):
            if name is None:
                selected = where = None
            elif name == SELECTED_VARIABLE:
                selected, where = value, item["path"]
    return selected, where


def boot_selection_problem(host, files, selected, root="/"):
    """The refusal where the host's own files of nvidia-mig-manager.service select a MIG config at boot other than
    the package's ``all-disabled`` (or gpusplit's ``selected``): gpusplit's drop-in would replace that selection, so
    the host's own layout would no longer be applied at boot. None where there is nothing to replace."""
    config, where = boot_selection(files, root)
    if config in (None, "", PACKAGE_SELECTION, selected):
        return None
    return (
        f"{host}: {SERVICE} applies the host's own MIG config '{config}' at boot ({SELECTED_VARIABLE} in {where}); "
        f"gpusplit's drop-in {DROPIN_PATH} would replace that selection with '{selected}', and the host's layout "
        f"would no longer be applied at boot. Either select {PACKAGE_SELECTION} there (or remove the assignment) "
        "and let gpusplit keep the Kubernetes share's geometry, or leave gpusplit_mig_geometry unset for this host "
        "and put the Kubernetes share's GPUs into the host's own config. Nothing was changed."
    )


def boot_check(node_plan, selected, stdout, root="/"):
    """gpu_host's entry point mig, after reading the service's files (:func:`read_unit_argv`'s ``stdout``): raises
    MigApplyError with :func:`boot_selection_problem`'s refusal; else ``{"boot_selection": (config, path)}``."""
    if not isinstance(node_plan, dict):
        raise MigApplyError(
            f"plan: expected the node's plan (fleet_plan's nodes[<host>]), got {type_name(node_plan)}"
        )
    if not isinstance(root, str) or not root.startswith("/"):
        raise MigApplyError(f"root (gpusplit_host_root): expected an absolute path, got {root!r}")
    files = parse_unit_read(stdout)
    problem = boot_selection_problem(node_plan.get("host") or node_plan.get("node"), files, selected, root)
    if problem:
        raise MigApplyError(problem)
    config, where = boot_selection(files, root)
    return {"boot_selection": config, "boot_selection_file": where}


def undo_paths(root="/"):
    """What the unsplit takes back of the MIG apply below ``root``: ``config_path``, ``dropin_path`` and
    ``dropin_dir`` (removed too where the drop-in is all it holds: the apply made it)."""
    if not isinstance(root, str) or not root.startswith("/"):
        raise MigApplyError(f"root (gpusplit_host_root): expected an absolute path, got {root!r}")
    return {
        "config_path": under(root, CONFIG_PATH),
        "dropin_path": under(root, DROPIN_PATH),
        "dropin_dir": under(root, DROPIN_DIR),
    }


def undo_list_argv(root="/"):
    """The command that lists the names in the drop-in folder below ``root``, one a line (nothing where it is not
    there): a read, run in check mode too."""
    return ["sh", "-c", '[ ! -d "$1" ] || ls -A "$1"', "sh", undo_paths(root)["dropin_dir"]]


def undo_removals(root, names):
    """The paths the unsplit removes, in order, each with why: gpusplit's config, its drop-in, and the drop-in folder
    where ``names`` (what :func:`undo_list_argv`'s command listed in it) holds nothing else."""
    paths = undo_paths(root)
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise MigApplyError(
            f"names: expected the names in {paths['dropin_dir']} (a list), got {type_name(names)}"
        )
    out = [
        {"path": paths["config_path"], "why": "gpusplit's mig-parted config of the node's Kubernetes share"},
        {"path": paths["dropin_path"], "why": f"gpusplit's drop-in of {SERVICE}"},
    ]
    if all(n in ("", DROPIN_NAME) for n in names):
        out.append(
            {"path": paths["dropin_dir"], "why": "the drop-in folder: nothing but gpusplit's drop-in in it"}
        )
    return out
