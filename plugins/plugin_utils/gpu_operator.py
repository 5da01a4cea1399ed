# Copyright: gpusplit contributors
# Apache-2.0
"""GPU Operator mode: the one ClusterPolicy, the Helm values, what the role gpu_operator does. Pure.

The GPU Operator reconciles a single ClusterPolicy for the whole cluster, so "one ClusterPolicy per
node" cannot work. What does: the operator keeps driver, container toolkit, GFD and DCGM on every
GPU node; on each split node its device plugin is switched off with the node label
``nvidia.com/gpu.deploy.device-plugin=false`` (render.node_labels) and gpusplit's per-node split
plugin runs there instead; nodes gpusplit does not plan keep the operator's plugin.

This module decides, from the fleet plan and what was read from the cluster (no I/O here):

- which ClusterPolicy to configure (several in the cluster: stop and say which one is active);
- the fields gpusplit owns in it: ``spec.toolkit.env`` hardening entries, ``spec.mig.strategy``
  (one MIG strategy for every gpu_operator node) and, only when the operator's CDI is off,
  ``spec.devicePlugin.env`` DEVICE_LIST_STRATEGY=volume-mounts for the operator's own plugin;
  ``toolkit.env`` and ``devicePlugin.env`` are atomic lists in the CRD, so the entries of other
  managers are merged in and kept (server-side apply of an atomic list replaces it whole);
- the same fields as Helm values for the ``gpu-operator`` chart when it is not installed yet;
- the operator's ``nvidia.com/mig.config`` node label of the nodes whose inventory asks for one;
- which device-plugin DaemonSets that gpusplit does not own can still land on a split node
  (the operator's plugin cannot: it is gated by the label above).

The checks over the fleet plan (MIG strategy, MIG configs, plugin hardening, collisions) are in
``gpu_operator_checks.py``; the nodes the operator manages are those whose mode says
``operator_managed`` in the mode table (``module_utils/_split/modes.py``). See docs/gpu-operator.md.
"""

from __future__ import annotations

import copy
import json
import re

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError, type_name
from ansible_collections.gpusplit.k8s.plugins.module_utils._split.planner import (
    MIG_STRATEGIES,
    SHARE_KUBERNETES,
    node_plans,
)
from ansible_collections.gpusplit.k8s.plugins.plugin_utils import split_render as render
from ansible_collections.gpusplit.k8s.plugins.plugin_utils._dra.chart import deep_merge
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.gpu_operator_checks import (
    LABEL_DEVICE_PLUGIN,
    MIG_CONFIG_DISABLED,
    check_plugin_hardening,
    colliding_plugin_daemonsets,
    dig,
    fleet_mig_strategy,
    mig_config_labels,
    operator_nodes,
)
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.operator_mig_layouts import (
    CONFIGMAP_NAME,
    check_layouts,
    default_layout_warnings,
    node_layouts,
    render_configmap,
)
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.settings import with_defaults

API_VERSION = "nvidia.com/v1"
KIND = "ClusterPolicy"

# nvidia-container-toolkit's installer (the operator's toolkit container) reads these variables
# (NVIDIA/nvidia-container-toolkit cmd/nvidia-ctk-installer/toolkit/toolkit.go, `EnvVars:`) and
# writes them as accept-nvidia-visible-devices-* into the toolkit's config.toml.
TOOLKIT_HARDENING_ENV = (
    ("ACCEPT_NVIDIA_VISIBLE_DEVICES_ENVVAR_WHEN_UNPRIVILEGED", "false"),
    ("ACCEPT_NVIDIA_VISIBLE_DEVICES_AS_VOLUME_MOUNTS", "true"),
)
# the operator's own plugin (unsplit nodes) under a hardened toolkit without CDI
OPERATOR_PLUGIN_HARDENING_ENV = (("DEVICE_LIST_STRATEGY", "volume-mounts"),)

# what each ClusterPolicy field held before gpusplit first set it, on the ClusterPolicy itself: it lives and goes
# with the object it describes, and gpusplit's own apply owns it (a ConfigMap would sit in a namespace the unsplit
# may delete, and could outlive or miss the ClusterPolicy)
ANNOTATION_ORIGINAL = "gpusplit.io/original-spec"
# the record's entry naming the Helm release gpusplit installed the operator with: what proves the release its own
RECORD_INSTALLED = "installed"
# the spec fields gpusplit may own, in the order owned_spec sets them; env lists: the names it sets there
OWNED_FIELDS = (
    (("toolkit", "env"), TOOLKIT_HARDENING_ENV),
    (("devicePlugin", "env"), OPERATOR_PLUGIN_HARDENING_ENV),
    (("mig", "strategy"), None),
    (("migManager", "config", "name"), None),
)

LABEL_MIG_CONFIG = "nvidia.com/mig.config"
LABEL_MIG_CONFIG_STATE = "nvidia.com/mig.config.state"
_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
INSTALL_CHOICES = ("auto", "helm", "skip")

DEFAULT_SETTINGS = {
    "clusterpolicy": None,  # the ClusterPolicy to configure when there are several
    "install": "auto",  # auto: helm only when no ClusterPolicy exists; helm: always; skip: never
    "toolkit_hardening": True,
    "mig_strategy": None,  # None: the strategy of the gpu_operator nodes
    # gpusplit_plugin_settings.hardening of the split plugins: the same default as theirs
    "plugin_hardening": render.DEFAULT_SETTINGS["hardening"],
    "helm_values": {},  # the user's own chart values, merged under gpusplit's
    "stock_plugin_action": "refuse",
    "operator_managed": True,
    "field_manager": "gpusplit",
    "node_field_manager": "gpusplit-gpu-operator",
    "namespace": "gpu-operator",
}


class OperatorError(GpusplitError):
    """One or more refusals; ``errors`` holds every message."""


# --------------------------------------------------------------------------------------------
# settings


def resolve_settings(settings=None):
    out = with_defaults(settings, DEFAULT_SETTINGS, "settings", OperatorError)
    errors = []
    if out["install"] not in INSTALL_CHOICES:
        errors.append(
            f"gpusplit_operator_install {out['install']!r} is not one of {', '.join(INSTALL_CHOICES)}"
        )
    if out["mig_strategy"] not in (None, *MIG_STRATEGIES):
        errors.append(
            f"gpusplit_operator_mig_strategy {out['mig_strategy']!r} is not one of {', '.join(MIG_STRATEGIES)}"
        )
    for key in ("toolkit_hardening", "operator_managed"):
        if not isinstance(out[key], bool):
            errors.append(f"settings.{key} {out[key]!r} is not a boolean")
    if not isinstance(out["helm_values"], dict):
        errors.append(f"gpusplit_operator_helm_values {out['helm_values']!r} is not a mapping")
    name = out["clusterpolicy"]
    if name is not None and (not isinstance(name, str) or not _NAME_RE.match(name)):
        errors.append(f"gpusplit_operator_clusterpolicy {name!r} is not an object name")
    if errors:
        raise OperatorError(errors)
    return out


# --------------------------------------------------------------------------------------------
# env lists (atomic in the CRD: whoever applies one owns all of it)


def merge_env(existing, owned):
    """``existing`` with gpusplit's ``owned`` (name, value) pairs set; others' entries kept.

    Entries of other managers keep their place and content; an entry of the same name gets
    gpusplit's value in place (a duplicate of it further down is dropped, since the container
    would take the last one); missing ones are appended in ``owned`` order.
    Returns (list, notes) where notes name every entry whose value gpusplit replaced.
    """
    wanted = dict(owned)
    merged, notes, seen = [], [], set()
    for entry in existing or []:
        if not isinstance(entry, dict):
            continue
        name = entry.get("name")
        if name not in wanted:
            merged.append(copy.deepcopy(entry))
            continue
        if name in seen:
            notes.append(f"{name}: a second entry {entry.get('value')!r} was dropped")
            continue
        seen.add(name)
        if entry.get("value") != wanted[name] or set(entry) - {"name", "value"}:
            shown = entry.get("value") if "value" in entry else "(valueFrom)"
            notes.append(f"{name}: {shown!r} replaced by {wanted[name]!r}")
        merged.append({"name": name, "value": wanted[name]})
    for name, value in owned:
        if name not in seen:
            merged.append({"name": name, "value": value})
    return merged, notes


# --------------------------------------------------------------------------------------------
# managedFields: what a field manager owns (so that gpusplit never drops a field by omission)


def owned_field_paths(obj, manager):
    """Paths like ('spec', 'toolkit', 'env') that ``manager`` owns through Apply on ``obj``."""
    paths = set()

    def walk(fields, prefix):
        for key, sub in (fields or {}).items():
            if not key.startswith("f:"):
                continue
            path = (*prefix, key[2:])
            paths.add(path)
            if isinstance(sub, dict):
                walk(sub, path)

    for entry in ((obj or {}).get("metadata") or {}).get("managedFields") or []:
        if entry.get("manager") == manager and entry.get("operation") == "Apply":
            walk(entry.get("fieldsV1") or {}, ())
    return paths


# --------------------------------------------------------------------------------------------
# which ClusterPolicy


def _created(cp):
    return dig(cp, "metadata", "creationTimestamp") or ""


def _state(cp):
    return dig(cp, "status", "state") or "unknown"


def select_clusterpolicy(items, wanted=None):
    """Which ClusterPolicy gpusplit configures. Raises OperatorError when it cannot tell.

    The operator reconciles one ClusterPolicy (the first it sees, in practice the oldest) and marks
    the others ``status.state: ignored``. Returns None when there is none, else
    {"active", "managed", "policies": [{name, created, state, active}], "warnings"}.
    """
    items = [i for i in items or [] if dig(i, "metadata", "name")]
    if not items:
        if wanted:
            return _refuse_missing(wanted, [])
        return None
    items = sorted(items, key=lambda i: (_created(i), i["metadata"]["name"]))
    reconciled = [i for i in items if _state(i) in ("ready", "notReady")]
    if len(reconciled) == 1 and all(_state(i) == "ignored" for i in items if i is not reconciled[0]):
        active = reconciled[0]
        how = "the one the operator reconciles; the others are ignored"
    else:
        active = items[0]
        how = "the oldest; the operator reconciles only one and marks the others ignored"
    names = [i["metadata"]["name"] for i in items]
    policies = [
        {
            "name": i["metadata"]["name"],
            "created": _created(i),
            "state": _state(i),
            "active": i is active,
        }
        for i in items
    ]
    listing = "; ".join(
        f"{p['name']} (created {p['created'] or '?'}, state {p['state']}{', ACTIVE' if p['active'] else ''})"
        for p in policies
    )
    warnings = []
    if wanted is None:
        if len(items) > 1:
            raise OperatorError(
                [
                    f"{len(items)} ClusterPolicies in the cluster: {listing}. The active one is "
                    f"{active['metadata']['name']} ({how}). Set gpusplit_operator_clusterpolicy to the "
                    "ClusterPolicy gpusplit should configure (normally the active one), or delete the "
                    "others. Nothing was changed."
                ]
            )
        managed = active
    else:
        if wanted not in names:
            return _refuse_missing(wanted, names)
        managed = items[names.index(wanted)]
        if _state(managed) == "ignored":
            raise OperatorError(
                [
                    f"gpusplit_operator_clusterpolicy names {wanted}, but the operator ignores it "
                    f"(status.state ignored); it reconciles {active['metadata']['name']}. "
                    f"ClusterPolicies: {listing}. Nothing was changed."
                ]
            )
        if managed is not active:
            warnings.append(
                f"ClusterPolicy {wanted} is configured as asked, but {active['metadata']['name']} "
                "looks active (the oldest); check status.state once the operator has reconciled"
            )
    return {
        "active": active["metadata"]["name"],
        "managed": managed["metadata"]["name"],
        "policies": policies,
        "listing": listing,
        "warnings": warnings,
    }


def _refuse_missing(wanted, names):
    have = ", ".join(names) if names else "none"
    raise OperatorError(
        [f"gpusplit_operator_clusterpolicy names {wanted}, which does not exist (ClusterPolicies: {have})"]
    )


# --------------------------------------------------------------------------------------------
# what gpusplit owns: ClusterPolicy fields and Helm values


def _cdi_enabled(spec_or_values):
    value = dig(spec_or_values, "cdi", "enabled")
    return True if value is None else bool(value)  # the CRD and the chart default to true


def owned_spec(live, settings, strategy, manager, mig_config_name=None):
    """(spec fields gpusplit applies, notes) for the live ClusterPolicy ``live``.

    A field gpusplit owned before and no longer wants is sent with its live value, so that it is
    never deleted by omission (server-side apply removes fields a manager stops sending).
    """
    spec = (live or {}).get("spec") or {}
    owned = owned_field_paths(live, manager)
    out, notes = {}, []

    def env_field(section, wanted_pairs):
        live_env = dig(spec, section, "env")
        if wanted_pairs:
            merged, changed = merge_env(live_env, wanted_pairs)
            notes.extend(f"spec.{section}.env {n}" for n in changed)
            out.setdefault(section, {})["env"] = merged
        elif ("spec", section, "env") in owned and live_env is not None:
            out.setdefault(section, {})["env"] = copy.deepcopy(live_env)

    env_field("toolkit", TOOLKIT_HARDENING_ENV if settings["toolkit_hardening"] else ())
    hardened_plugin = settings["toolkit_hardening"] and not _cdi_enabled(spec)
    env_field("devicePlugin", OPERATOR_PLUGIN_HARDENING_ENV if hardened_plugin else ())
    live_strategy = dig(spec, "mig", "strategy")
    if strategy is not None:
        if live_strategy not in (None, strategy):
            notes.append(f"spec.mig.strategy {live_strategy!r} replaced by {strategy!r}")
        out["mig"] = {"strategy": strategy}
    elif ("spec", "mig", "strategy") in owned and live_strategy is not None:
        out["mig"] = {"strategy": live_strategy}
    # the MIG manager's config: gpusplit's ConfigMap of per-node layouts (operator_mig_layouts.py)
    live_config = dig(spec, "migManager", "config", "name")
    if mig_config_name is not None:
        out["migManager"] = {"config": {"name": mig_config_name}}
    elif ("spec", "migManager", "config", "name") in owned and live_config is not None:
        out["migManager"] = {"config": {"name": live_config}}
    return out, notes


def recorded_install(record):
    """``(namespace, release)`` of the record's :data:`RECORD_INSTALLED` entry; None: none, or unreadable."""
    entry = (record or {}).get(RECORD_INSTALLED)
    pair = (entry.get("namespace"), entry.get("release")) if isinstance(entry, dict) else ()
    return pair if pair and all(isinstance(v, str) and v for v in pair) else None


def install_marker(helm_release, clusterpolicies_before):
    """The record's :data:`RECORD_INSTALLED` entry where gpusplit's Helm call installed the operator: ``helm_release``
    (``{"namespace", "release"}`` of the chart it ran) when no ClusterPolicy was in the cluster before it; None
    otherwise (a release that was there before stays unproven)."""
    if not isinstance(helm_release, dict) or clusterpolicies_before:
        return None
    if recorded_install({RECORD_INSTALLED: helm_release}) is None:
        raise OperatorError(
            f"helm_release {helm_release!r}: give the namespace and release the chart was installed as"
        )
    return {"namespace": helm_release["namespace"], "release": helm_release["release"]}


def read_original(obj):
    """The record of :data:`ANNOTATION_ORIGINAL` on ``obj``: ``({field: entry}, problem)``; ``({}, None)`` where there
    is none, ``({}, why)`` where it cannot be read."""
    text = (dig(obj, "metadata", "annotations") or {}).get(ANNOTATION_ORIGINAL)
    if text is None:
        return {}, None
    try:
        record = json.loads(text)
    except (TypeError, ValueError) as exc:
        return {}, f"annotation {ANNOTATION_ORIGINAL} is not JSON ({exc})"
    if not isinstance(record, dict) or not all(isinstance(v, dict) for v in record.values()):
        return {}, f"annotation {ANNOTATION_ORIGINAL} is not a mapping of field to entry"
    return record, None


def original_record(live, spec, manager, installed=None):
    """The record gpusplit keeps on the ClusterPolicy, as annotation text, for the fields of ``spec`` it applies.

    Per field (``toolkit.env``, ...): ``before`` is what the live ClusterPolicy held before gpusplit first set it
    (None: absent), kept from the record already there; ``unknown`` where gpusplit owned the field before it kept a
    record (the live value may be its own); ``wrote`` is what this apply sends. :data:`RECORD_INSTALLED`:
    ``installed`` (:func:`install_marker`), else the entry already there, kept.
    """
    record, _problem = read_original(live)
    owned = owned_field_paths(live, manager)
    out = {}
    kept = recorded_install(record)
    if installed or kept:
        out[RECORD_INSTALLED] = installed or dict(zip(("namespace", "release"), kept, strict=True))
    for path, _env in OWNED_FIELDS:
        sent = dig(spec, *path)
        if sent is None:
            continue
        key = ".".join(path)
        entry = record.get(key)
        if entry is None or not ("before" in entry or entry.get("unknown")):
            if ("spec", *path) in owned:
                entry = {"before": None, "unknown": True}
            else:
                entry = {"before": copy.deepcopy(dig(live, "spec", *path))}
        out[key] = {**{k: v for k, v in entry.items() if k != "wrote"}, "wrote": copy.deepcopy(sent)}
    return json.dumps(out, sort_keys=True, separators=(",", ":"))


def render_clusterpolicy(name, spec, original=None):
    """The ClusterPolicy object carrying only gpusplit's fields (templates/clusterpolicy.yaml.j2); ``original``:
    :func:`original_record`'s text, sent on every apply (an apply that left it out would remove it)."""
    return render.render_template(
        "clusterpolicy.yaml.j2",
        api_version=API_VERSION,
        kind=KIND,
        name=name,
        original=original,
        annotation_original=ANNOTATION_ORIGINAL,
        toolkit_env=dig(spec, "toolkit", "env"),
        device_plugin_env=dig(spec, "devicePlugin", "env"),
        mig_strategy=dig(spec, "mig", "strategy"),
        mig_config_name=dig(spec, "migManager", "config", "name"),
    )


def helm_values(settings, strategy, mig_config_name=None):
    """(values, notes): the user's chart values with gpusplit's fields set on top."""
    values = copy.deepcopy(settings["helm_values"] or {})
    notes = []
    owned = {}
    if settings["toolkit_hardening"]:
        merged, changed = merge_env(dig(values, "toolkit", "env"), TOOLKIT_HARDENING_ENV)
        notes.extend(f"toolkit.env {n}" for n in changed)
        owned["toolkit"] = {"env": merged}
        if not _cdi_enabled(values):
            merged, changed = merge_env(dig(values, "devicePlugin", "env"), OPERATOR_PLUGIN_HARDENING_ENV)
            notes.extend(f"devicePlugin.env {n}" for n in changed)
            owned["devicePlugin"] = {"env": merged}
    if strategy is not None:
        if dig(values, "mig", "strategy") not in (None, strategy):
            notes.append(f"mig.strategy {dig(values, 'mig', 'strategy')!r} replaced by {strategy!r}")
        owned["mig"] = {"strategy": strategy}
    if mig_config_name is not None:
        owned["migManager"] = {"config": {"name": mig_config_name}}
    return deep_merge(values, owned), notes


def render_mig_label(node, config):
    """A Node carrying only the operator's MIG config label (applied by its own field manager)."""
    obj = render.render_template("node.yaml.j2", node=node, labels={LABEL_MIG_CONFIG: config}, annotations={})
    if not obj["metadata"].get("annotations"):
        obj["metadata"].pop("annotations", None)  # no annotations: send none (not null)
    return obj


# --------------------------------------------------------------------------------------------
# everything at once, for the role


# what operator_config takes besides the plan and the settings: argument -> (type, what it is)
INPUTS = {
    "mig_configs": (dict, "a mapping of host to gpusplit_mig_config"),
    "clusterpolicies": (list, "a list of ClusterPolicy objects (k8s_info resources)"),
    "nodes": (list, "a list of Node objects (k8s_info resources)"),
    "daemonsets": (list, "a list of DaemonSet objects (k8s_info resources)"),
}


def _require_inputs(**given):
    """Refuse (OperatorError, every reason) an argument of operator_config of the wrong shape."""
    errors = []
    for name, value in given.items():
        kind, what = INPUTS[name]
        if value is None:
            continue
        if not isinstance(value, kind):
            errors.append(f"{name}: expected {what}, got {type_name(value)}")
        elif kind is list:
            errors.extend(
                f"{name}[{i}]: expected a mapping (a Kubernetes object), got {type_name(item)}"
                for i, item in enumerate(value)
                if not isinstance(item, dict)
            )
    if errors:
        raise OperatorError(errors)


def operator_config(
    plan, mig_configs=None, clusterpolicies=None, settings=None, nodes=None, daemonsets=None, installed=None
):
    """What the role gpu_operator does, decided up front. Raises OperatorError with every refusal.

    plan: the fleet plan; mig_configs: {host: gpusplit_mig_config}; clusterpolicies: the live
    ClusterPolicy objects (k8s_info resources); nodes: live Node objects (MIG state, labels left in
    place); daemonsets: live DaemonSets (collisions, when stock_plugin_action is refuse); installed: the Helm
    release gpusplit installed the operator with (:func:`install_marker`), kept in the ClusterPolicy's record.
    Returns {helm, helm_values, clusterpolicy, objects, mig_labels, mig_strategy, operator_namespace,
    warnings, summary}.
    """
    _require_inputs(
        mig_configs=mig_configs, clusterpolicies=clusterpolicies, nodes=nodes, daemonsets=daemonsets
    )
    s = resolve_settings(settings)
    errors, warnings, summary = [], [], []

    strategy, errs = fleet_mig_strategy(plan, s["mig_strategy"])
    errors.extend(errs)
    errors.extend(check_plugin_hardening(plan, s["plugin_hardening"], s["toolkit_hardening"]))

    selected = None
    try:
        selected = select_clusterpolicy(clusterpolicies, s["clusterpolicy"])
    except OperatorError as exc:
        errors.extend(exc.errors)
    live = None
    if selected is not None:
        live = next(c for c in clusterpolicies if c["metadata"]["name"] == selected["managed"])
        warnings.extend(selected["warnings"])

    layouts = node_layouts(plan)
    mig_config_name = CONFIGMAP_NAME if layouts else None
    helm = False
    values, value_notes = helm_values(s, strategy, mig_config_name)
    if s["install"] == "helm" or (s["install"] == "auto" and not clusterpolicies):
        helm = True
    elif s["install"] == "skip" and not clusterpolicies:
        errors.append(
            "the GPU Operator is not installed (no ClusterPolicy in the cluster) and "
            "gpusplit_operator_install is skip: install the chart or set gpusplit_operator_install to auto"
        )
    migmanager = dig(live, "spec", "migManager", "enabled") if live else dig(values, "migManager", "enabled")
    labels, errs, warns = mig_config_labels(plan, mig_configs, migmanager is not False)
    errors.extend(errs)
    warnings.extend(warns)
    errors.extend(
        check_layouts(layouts, labels, live, nodes, dig(s["helm_values"], "migManager", "config", "name"))
    )
    if layouts and migmanager is False:
        errors.append(
            f"gpusplit_mig_geometry is set for {', '.join(sorted(layouts))}, but the ClusterPolicy has "
            "spec.migManager.enabled false: nothing would apply it. Enable the MIG manager"
        )
    labels.update({node: name for node, (name, _entries) in layouts.items()})
    warnings.extend(default_layout_warnings(plan, labels, live, values, nodes, migmanager is not False))

    if daemonsets is not None and s["stock_plugin_action"] == "refuse":
        colliding = colliding_plugin_daemonsets(daemonsets, plan, s["operator_managed"])
        if colliding:
            names = ", ".join(f"{d['metadata'].get('namespace')}/{d['metadata']['name']}" for d in colliding)
            errors.append(
                f"device plugin(s) that gpusplit does not own can run on split nodes: {names}. Two device "
                "plugins on one node share the kubelet checkpoint. Set gpusplit_stock_plugin_action=exclude "
                "or remove them. Nothing was changed."
            )
    if errors:
        raise OperatorError(errors)

    namespace = dig(live, "status", "namespace") or s["namespace"]
    # the MIG manager's ConfigMap first: the ClusterPolicy names it
    objects = [render_configmap(namespace, layouts)] if layouts else []
    if live is not None:
        spec, notes = owned_spec(live, s, strategy, s["field_manager"], mig_config_name)
        warnings.extend(f"ClusterPolicy {selected['managed']}: {n}" for n in notes)
        if spec or installed or recorded_install(read_original(live)[0]):
            original = original_record(live, spec, s["field_manager"], installed)
            objects.append(render_clusterpolicy(selected["managed"], spec, original))
        why = (
            "active"
            if selected["managed"] == selected["active"]
            else "named by gpusplit_operator_clusterpolicy"
        )
        summary.append(
            f"configures ClusterPolicy {selected['managed']} ({why}); in the cluster: {selected['listing']}"
        )
    if helm:
        warnings.extend(f"helm values: {n}" for n in value_notes)
    summary.append(f"MIG strategy for the gpu_operator nodes: {strategy or 'not set (no gpu_operator node)'}")
    summary.append(
        "toolkit hardening: "
        + (", ".join(f"{k}={v}" for k, v in TOOLKIT_HARDENING_ENV) if s["toolkit_hardening"] else "off")
    )
    off = [
        p["node"]
        for p in node_plans(plan)
        if render.node_labels(p, s["operator_managed"]).get(LABEL_DEVICE_PLUGIN) == "false"
    ]
    summary.append(
        f"operator device plugin off (label {LABEL_DEVICE_PLUGIN}=false, split plugin instead) on: "
        f"{', '.join(off) or 'none'}"
    )
    planned = {p["node"] for p in node_plans(plan)}
    unsplit = sorted(
        dig(n, "metadata", "name")
        for n in nodes or []
        if (dig(n, "metadata", "labels") or {}).get(render.LABEL_GPU_PRESENT) == "true"
        and dig(n, "metadata", "name") not in planned
    )
    if unsplit:
        summary.append(
            f"GPU nodes gpusplit does not plan keep the operator's device plugin: {', '.join(unsplit)}"
        )
    summary.extend(_mig_report(plan, labels, nodes, s["node_field_manager"], warnings))
    return {
        "helm": helm,
        "helm_values": values,
        "clusterpolicy": selected,
        "objects": objects,
        "mig_labels": [render_mig_label(node, config) for node, config in sorted(labels.items())],
        "mig_strategy": strategy,
        "operator_namespace": namespace,
        "warnings": warnings,
        "summary": summary,
    }


def _mig_report(plan, labels, nodes, node_manager, warnings):
    lines = []
    live = {dig(n, "metadata", "name"): n for n in nodes or []}
    plans = {p["node"]: p for p in node_plans(plan)}
    for p in operator_nodes(plan):
        if p["kubernetes_mig_uuids"] and p["node"] not in labels:
            lines.append(f"{p['node']}: Kubernetes gets MIG devices {', '.join(p['kubernetes_mig_uuids'])}")
    for node, config in sorted(labels.items()):
        p = plans[node]
        migs = p["kubernetes_mig_uuids"]
        line = f"{node}: {LABEL_MIG_CONFIG}={config}"
        if migs:
            line += f"; Kubernetes gets MIG devices {', '.join(migs)}"
        node_labels = dig(live.get(node), "metadata", "labels") or {}
        state = node_labels.get(LABEL_MIG_CONFIG_STATE)
        if node in live and node_labels.get(LABEL_MIG_CONFIG) == config and state not in (None, "success"):
            warnings.append(
                f"{node}: the MIG manager reports {LABEL_MIG_CONFIG_STATE}={state}; re-run gpusplit once it "
                "is success, so that the plan counts the new MIG devices"
            )
        wants_mig = config != MIG_CONFIG_DISABLED
        kube_gpus = [g for g in p["gpus"] if g["share"] == SHARE_KUBERNETES]
        if wants_mig and kube_gpus and not any(g["mig_enabled"] for g in kube_gpus):
            warnings.append(
                f"{node}: {LABEL_MIG_CONFIG}={config} asks for MIG but no GPU of the Kubernetes share has "
                "MIG enabled yet; the plan counts whole GPUs until the MIG manager has applied it and "
                "gpusplit runs again"
            )
        lines.append(line)
    for node, obj in sorted(live.items()):
        if node in labels or node is None:
            continue
        value = (dig(obj, "metadata", "labels") or {}).get(LABEL_MIG_CONFIG)
        if value is not None and ("metadata", "labels", LABEL_MIG_CONFIG) in owned_field_paths(
            obj, node_manager
        ):
            lines.append(
                f"{node}: {LABEL_MIG_CONFIG}={value} was set by gpusplit and is no longer asked for; left in "
                "place (removing it would make the MIG manager apply its default config)"
            )
    return lines
