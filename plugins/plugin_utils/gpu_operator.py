# Copyright: gpusplit contributors
# Apache-2.0
"""GPU Operator mode: the one ClusterPolicy, the MIG config labels and the plugin collisions. Pure.

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

See docs/gpu-operator.md.
"""

from __future__ import annotations

import copy
import re

from ansible_collections.gpusplit.k8s.plugins.module_utils._diagnose.diagnose import requirement_matches
from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError
from ansible_collections.gpusplit.k8s.plugins.module_utils._split import verify
from ansible_collections.gpusplit.k8s.plugins.module_utils._split.planner import (
    DEVICE_PLUGIN_MODES,
    MIG_STRATEGIES,
    node_plans,
)
from ansible_collections.gpusplit.k8s.plugins.plugin_utils import render

API_VERSION = "nvidia.com/v1"
KIND = "ClusterPolicy"
MODE = "gpu_operator"

# nvidia-container-toolkit's installer (the operator's toolkit container) reads these variables
# (NVIDIA/nvidia-container-toolkit cmd/nvidia-ctk-installer/toolkit/toolkit.go, `EnvVars:`) and
# writes them as accept-nvidia-visible-devices-* into the toolkit's config.toml.
TOOLKIT_HARDENING_ENV = (
    ("ACCEPT_NVIDIA_VISIBLE_DEVICES_ENVVAR_WHEN_UNPRIVILEGED", "false"),
    ("ACCEPT_NVIDIA_VISIBLE_DEVICES_AS_VOLUME_MOUNTS", "true"),
)
# the operator's own plugin (unsplit nodes) under a hardened toolkit without CDI
OPERATOR_PLUGIN_HARDENING_ENV = (("DEVICE_LIST_STRATEGY", "volume-mounts"),)
PLUGIN_HARDENING_NEEDED = "volume-mounts"

LABEL_DEPLOY_PREFIX = "nvidia.com/gpu.deploy."
LABEL_DEVICE_PLUGIN = render.LABEL_OPERATOR_DEVICE_PLUGIN  # nvidia.com/gpu.deploy.device-plugin
LABEL_MIG_CONFIG = "nvidia.com/mig.config"
LABEL_MIG_CONFIG_STATE = "nvidia.com/mig.config.state"
MIG_CONFIG_DISABLED = "all-disabled"
# mig-parted's stock configs that do not give one profile per GPU (mig_strategy single needs one)
MIG_CONFIGS_NOT_SINGLE = ("all-enabled", "all-balanced")
_MIG_CONFIG_ONE_PROFILE = re.compile(r"^all-\d+g\.\d+gb(\+me)?$")
_LABEL_VALUE_RE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
INSTALL_CHOICES = ("auto", "helm", "skip")

DEFAULT_SETTINGS = {
    "clusterpolicy": None,  # the ClusterPolicy to configure when there are several
    "install": "auto",  # auto: helm only when no ClusterPolicy exists; helm: always; skip: never
    "toolkit_hardening": True,
    "mig_strategy": None,  # None: the strategy of the gpu_operator nodes
    "plugin_hardening": "envvar",  # gpusplit_plugin_settings.hardening of the split plugins
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
    if settings is None:
        settings = {}
    if not isinstance(settings, dict):
        raise OperatorError([f"settings: expected a mapping, got {type(settings).__name__}"])
    unknown = sorted(str(k) for k in settings if k not in DEFAULT_SETTINGS)
    if unknown:
        raise OperatorError(
            [f"settings: unknown key(s) {', '.join(unknown)} (allowed: {', '.join(DEFAULT_SETTINGS)})"]
        )
    out = copy.deepcopy(DEFAULT_SETTINGS)
    for key, value in settings.items():
        if value is not None:
            out[key] = value
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


def _dig(obj, *path, default=None):
    for key in path:
        if not isinstance(obj, dict) or key not in obj:
            return default
        obj = obj[key]
    return obj


# --------------------------------------------------------------------------------------------
# which ClusterPolicy


def _created(cp):
    return _dig(cp, "metadata", "creationTimestamp") or ""


def _state(cp):
    return _dig(cp, "status", "state") or "unknown"


def select_clusterpolicy(items, wanted=None):
    """Which ClusterPolicy gpusplit configures. Raises OperatorError when it cannot tell.

    The operator reconciles one ClusterPolicy (the first it sees, in practice the oldest) and marks
    the others ``status.state: ignored``. Returns None when there is none, else
    {"active", "managed", "policies": [{name, created, state, active}], "warnings"}.
    """
    items = [i for i in items or [] if _dig(i, "metadata", "name")]
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
# fleet checks: MIG strategy, MIG configs, plugin hardening


def operator_nodes(plan):
    return [p for p in node_plans(plan) if p["mode"] == MODE]


def fleet_mig_strategy(plan, requested=None):
    """(strategy or None, errors): the one MIG strategy of every gpu_operator node."""
    by_strategy = {}
    for p in operator_nodes(plan):
        by_strategy.setdefault(p["mig_strategy"], []).append(p["host"])
    errors = []
    if len(by_strategy) > 1:
        detail = "; ".join(f"{s}: {', '.join(hosts)}" for s, hosts in sorted(by_strategy.items()))
        errors.append(
            "the GPU Operator has one MIG strategy for the whole cluster (ClusterPolicy "
            f"spec.mig.strategy), but the gpu_operator nodes ask for several ({detail}). Give every "
            "gpu_operator node the same gpusplit_mig_strategy: single also serves nodes without MIG "
            "(whole GPUs), mixed serves several MIG profiles"
        )
        return None, errors
    strategy = next(iter(by_strategy), None)
    if requested is not None and strategy is not None and requested != strategy:
        errors.append(
            f"gpusplit_operator_mig_strategy is {requested}, but the gpu_operator nodes use "
            f"{strategy} ({', '.join(by_strategy[strategy])}); the split plugins and the operator must agree"
        )
        return None, errors
    return (requested if strategy is None else strategy), errors


def mig_config_labels(plan, configs, migmanager_enabled=True):
    """({node: config}, errors, warnings) for ``configs`` = {host: gpusplit_mig_config}."""
    plans = {p["host"]: p for p in node_plans(plan)}
    labels, errors, warnings = {}, [], []
    for host in sorted(configs or {}, key=str):
        config = configs[host]
        if config in (None, ""):
            continue
        p = plans.get(host)
        if p is None:
            continue  # not in this play's plan
        if not isinstance(config, str) or not _LABEL_VALUE_RE.match(config) or len(config) > 63:
            errors.append(f"{host}: gpusplit_mig_config {config!r} is not a valid label value")
            continue
        if p["mode"] != MODE:
            errors.append(
                f"{host}: gpusplit_mig_config {config!r} needs the GPU Operator's MIG manager, but the "
                f"node is in mode {p['mode']} (set gpusplit_mode gpu_operator, or configure MIG yourself)"
            )
            continue
        strategy = p["mig_strategy"]
        if strategy == "none" and config != MIG_CONFIG_DISABLED:
            errors.append(
                f"{host}: gpusplit_mig_config {config!r} enables MIG, but gpusplit_mig_strategy is none: "
                "the plugin would advertise the MIG GPUs as whole GPUs. Use single or mixed"
            )
            continue
        if strategy == "single" and config in MIG_CONFIGS_NOT_SINGLE:
            errors.append(
                f"{host}: gpusplit_mig_config {config!r} does not give every GPU one MIG profile, which "
                "mig_strategy single needs; use an all-<profile> config or mig_strategy mixed"
            )
            continue
        if (
            strategy == "single"
            and config != MIG_CONFIG_DISABLED
            and not _MIG_CONFIG_ONE_PROFILE.match(config)
        ):
            warnings.append(
                f"{host}: gpusplit_mig_config {config!r} is not a stock all-<profile> config; with "
                "mig_strategy single it must give every GPU of the Kubernetes share the same profile"
            )
        labels[p["node"]] = config
    if labels and not migmanager_enabled:
        errors.append(
            f"gpusplit_mig_config is set for {', '.join(sorted(labels))}, but the ClusterPolicy has "
            "spec.migManager.enabled false: nothing would apply the nvidia.com/mig.config label. "
            "Enable the MIG manager or remove gpusplit_mig_config"
        )
    return labels, errors, warnings


def check_plugin_hardening(plan, plugin_hardening, toolkit_hardening):
    """Errors when a hardened toolkit would hide the GPUs from the split plugins (docs/hardening.md)."""
    if not toolkit_hardening or plugin_hardening == PLUGIN_HARDENING_NEEDED:
        return []
    hosts = [
        p["host"] for p in node_plans(plan) if p["mode"] in DEVICE_PLUGIN_MODES and p["kubernetes_count"] > 0
    ]
    if not hosts:
        return []
    return [
        "gpusplit_operator_toolkit_hardening sets ACCEPT_NVIDIA_VISIBLE_DEVICES_ENVVAR_WHEN_UNPRIVILEGED="
        "false in the operator's toolkit, so an unprivileged split plugin no longer gets its own "
        f"NVIDIA_VISIBLE_DEVICES honoured; the split plugins of {', '.join(hosts)} run with hardening "
        f"{plugin_hardening!r} and would advertise 0 GPUs. Set gpusplit_plugin_settings.hardening: "
        "volume-mounts (DEVICE_LIST_STRATEGY=volume-mounts, CAP_SYS_ADMIN, never privileged), or set "
        "gpusplit_operator_toolkit_hardening: false"
    ]


# --------------------------------------------------------------------------------------------
# collisions: unmanaged device plugins that can still land on a split node


def _pod_spec(obj):
    if obj.get("kind") == "DaemonSet" or "template" in (obj.get("spec") or {}):
        return _dig(obj, "spec", "template", "spec", default={}) or {}
    return obj.get("spec") or {}


def _term_may_match(term, node, labels):
    exprs = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not exprs and not fields:
        return False  # an empty term matches no node
    for expr in exprs:
        if expr.get("key") in labels and not requirement_matches(expr, labels):
            return False
    for field in fields:
        if field.get("key") == "metadata.name" and not requirement_matches(
            {**field, "key": "name"}, {"name": node}
        ):
            return False
    return True


def may_run_on(pod_spec, node, known_labels):
    """False only when the pod spec cannot select ``node`` given the labels gpusplit sets there.

    Labels gpusplit does not set are unknown, so a selector on them may match (conservative).
    """
    for key, value in (pod_spec.get("nodeSelector") or {}).items():
        if key in known_labels and known_labels[key] != value:
            return False
    required = _dig(pod_spec, "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution")
    terms = (required or {}).get("nodeSelectorTerms") or []
    if required and not any(_term_may_match(t, node, known_labels) for t in terms):
        return False
    return True


def _other_operator_operand(pod_spec):
    """The operator gates each operand by its own nvidia.com/gpu.deploy.<operand>=true label.

    GPU feature discovery runs from the k8s-device-plugin image too, but only the device-plugin
    operand advertises GPUs: any other gated operand is not a device plugin.
    """
    gates = {
        k
        for k, v in (pod_spec.get("nodeSelector") or {}).items()
        if k.startswith(LABEL_DEPLOY_PREFIX) and v == "true"
    }
    required = _dig(pod_spec, "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution")
    terms = (required or {}).get("nodeSelectorTerms") or []
    if terms:
        per_term = []
        for term in terms:
            per_term.append(
                {
                    e.get("key")
                    for e in term.get("matchExpressions") or []
                    if str(e.get("key", "")).startswith(LABEL_DEPLOY_PREFIX)
                    and e.get("operator") == "In"
                    and e.get("values") == ["true"]
                }
            )
        if all(per_term):
            gates |= set.intersection(*per_term)
    return bool(gates) and LABEL_DEVICE_PLUGIN not in gates


def colliding_plugin_daemonsets(daemonsets, plan, operator_managed=False):
    """The device-plugin DaemonSets gpusplit does not own that can run on a split node.

    A DaemonSet is left out when its pod template cannot select any split node given the labels
    gpusplit sets on them (render.node_labels): the GPU Operator's plugin requires
    nvidia.com/gpu.deploy.device-plugin=true, which is false on every split node in mode
    gpu_operator (and in any mode with operator_managed); a stock plugin already kept off with
    gpusplit.io/split NotIn [true]. Other operator operands (GFD) are no device plugins.
    """
    split = [p for p in node_plans(plan) if p["split"]]
    out = []
    for ds in verify.unmanaged_plugin_daemonsets(daemonsets):
        spec = _pod_spec(ds)
        if _other_operator_operand(spec):
            continue
        if any(may_run_on(spec, p["node"], render.node_labels(p, operator_managed)) for p in split):
            out.append(ds)
    return out


def operator_plugin_pods_on_split_nodes(pods, plan):
    """Pods of the operator's device plugin (gated by the device-plugin label) still on split nodes."""
    split = {p["node"] for p in node_plans(plan) if p["split"]}
    out = []
    for pod in pods or []:
        spec = pod.get("spec") or {}
        if spec.get("nodeName") not in split:
            continue
        if not any(verify.is_device_plugin_container(c) for c in spec.get("containers") or []):
            continue
        if ((pod.get("metadata") or {}).get("labels") or {}).get(
            render.LABEL_MANAGED_BY
        ) == render.MANAGED_BY:
            continue
        if (spec.get("nodeSelector") or {}).get(LABEL_DEVICE_PLUGIN) == "true" or not may_run_on(
            spec, spec["nodeName"], {LABEL_DEVICE_PLUGIN: "false"}
        ):
            out.append(pod)
    return out


# --------------------------------------------------------------------------------------------
# what gpusplit owns: ClusterPolicy fields and Helm values


def _cdi_enabled(spec_or_values):
    value = _dig(spec_or_values, "cdi", "enabled")
    return True if value is None else bool(value)  # the CRD and the chart default to true


def owned_spec(live, settings, strategy, manager):
    """(spec fields gpusplit applies, notes) for the live ClusterPolicy ``live``.

    A field gpusplit owned before and no longer wants is sent with its live value, so that it is
    never deleted by omission (server-side apply removes fields a manager stops sending).
    """
    spec = (live or {}).get("spec") or {}
    owned = owned_field_paths(live, manager)
    out, notes = {}, []

    def env_field(section, wanted_pairs):
        live_env = _dig(spec, section, "env")
        if wanted_pairs:
            merged, changed = merge_env(live_env, wanted_pairs)
            notes.extend(f"spec.{section}.env {n}" for n in changed)
            out.setdefault(section, {})["env"] = merged
        elif ("spec", section, "env") in owned and live_env is not None:
            out.setdefault(section, {})["env"] = copy.deepcopy(live_env)

    env_field("toolkit", TOOLKIT_HARDENING_ENV if settings["toolkit_hardening"] else ())
    hardened_plugin = settings["toolkit_hardening"] and not _cdi_enabled(spec)
    env_field("devicePlugin", OPERATOR_PLUGIN_HARDENING_ENV if hardened_plugin else ())
    live_strategy = _dig(spec, "mig", "strategy")
    if strategy is not None:
        if live_strategy not in (None, strategy):
            notes.append(f"spec.mig.strategy {live_strategy!r} replaced by {strategy!r}")
        out["mig"] = {"strategy": strategy}
    elif ("spec", "mig", "strategy") in owned and live_strategy is not None:
        out["mig"] = {"strategy": live_strategy}
    return out, notes


def render_clusterpolicy(name, spec):
    """The ClusterPolicy object carrying only gpusplit's fields (templates/clusterpolicy.yaml.j2)."""
    return render.render_template(
        "clusterpolicy.yaml.j2",
        api_version=API_VERSION,
        kind=KIND,
        name=name,
        toolkit_env=_dig(spec, "toolkit", "env"),
        device_plugin_env=_dig(spec, "devicePlugin", "env"),
        mig_strategy=_dig(spec, "mig", "strategy"),
    )


def _deep_merge(base, over):
    out = copy.deepcopy(base)
    for key, value in (over or {}).items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def helm_values(settings, strategy):
    """(values, notes): the user's chart values with gpusplit's fields set on top."""
    values = copy.deepcopy(settings["helm_values"] or {})
    notes = []
    owned = {}
    if settings["toolkit_hardening"]:
        merged, changed = merge_env(_dig(values, "toolkit", "env"), TOOLKIT_HARDENING_ENV)
        notes.extend(f"toolkit.env {n}" for n in changed)
        owned["toolkit"] = {"env": merged}
        if not _cdi_enabled(values):
            merged, changed = merge_env(_dig(values, "devicePlugin", "env"), OPERATOR_PLUGIN_HARDENING_ENV)
            notes.extend(f"devicePlugin.env {n}" for n in changed)
            owned["devicePlugin"] = {"env": merged}
    if strategy is not None:
        if _dig(values, "mig", "strategy") not in (None, strategy):
            notes.append(f"mig.strategy {_dig(values, 'mig', 'strategy')!r} replaced by {strategy!r}")
        owned["mig"] = {"strategy": strategy}
    return _deep_merge(values, owned), notes


def render_mig_label(node, config):
    """A Node carrying only the operator's MIG config label (applied by its own field manager)."""
    obj = render.render_template("node.yaml.j2", node=node, labels={LABEL_MIG_CONFIG: config}, annotations={})
    if not obj["metadata"].get("annotations"):
        obj["metadata"].pop("annotations", None)  # no annotations: send none (not null)
    return obj


# --------------------------------------------------------------------------------------------
# everything at once, for the role


def operator_config(plan, mig_configs=None, clusterpolicies=None, settings=None, nodes=None, daemonsets=None):
    """What the role gpu_operator does, decided up front. Raises OperatorError with every refusal.

    plan: the fleet plan; mig_configs: {host: gpusplit_mig_config}; clusterpolicies: the live
    ClusterPolicy objects (k8s_info resources); nodes: live Node objects (MIG state, labels left in
    place); daemonsets: live DaemonSets (collisions, when stock_plugin_action is refuse).
    Returns {helm, helm_values, clusterpolicy, objects, mig_labels, mig_strategy, operator_namespace,
    warnings, summary}.
    """
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

    helm = False
    values, value_notes = helm_values(s, strategy)
    if s["install"] == "helm" or (s["install"] == "auto" and not clusterpolicies):
        helm = True
    elif s["install"] == "skip" and not clusterpolicies:
        errors.append(
            "the GPU Operator is not installed (no ClusterPolicy in the cluster) and "
            "gpusplit_operator_install is skip: install the chart or set gpusplit_operator_install to auto"
        )
    migmanager = (
        _dig(live, "spec", "migManager", "enabled") if live else _dig(values, "migManager", "enabled")
    )
    labels, errs, warns = mig_config_labels(plan, mig_configs, migmanager is not False)
    errors.extend(errs)
    warnings.extend(warns)

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

    objects = []
    if live is not None:
        spec, notes = owned_spec(live, s, strategy, s["field_manager"])
        warnings.extend(f"ClusterPolicy {selected['managed']}: {n}" for n in notes)
        if spec:
            objects.append(render_clusterpolicy(selected["managed"], spec))
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
        _dig(n, "metadata", "name")
        for n in nodes or []
        if (_dig(n, "metadata", "labels") or {}).get(render.LABEL_GPU_PRESENT) == "true"
        and _dig(n, "metadata", "name") not in planned
    )
    if unsplit:
        summary.append(
            f"GPU nodes gpusplit does not plan keep the operator's device plugin: {', '.join(unsplit)}"
        )
    summary.extend(_mig_report(plan, labels, nodes, s["node_field_manager"], warnings))

    namespace = _dig(live, "status", "namespace") or s["namespace"]
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
    live = {_dig(n, "metadata", "name"): n for n in nodes or []}
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
        node_labels = _dig(live.get(node), "metadata", "labels") or {}
        state = node_labels.get(LABEL_MIG_CONFIG_STATE)
        if node in live and node_labels.get(LABEL_MIG_CONFIG) == config and state not in (None, "success"):
            warnings.append(
                f"{node}: the MIG manager reports {LABEL_MIG_CONFIG_STATE}={state}; re-run gpusplit once it "
                "is success, so that the plan counts the new MIG devices"
            )
        wants_mig = config != MIG_CONFIG_DISABLED
        kube_gpus = [g for g in p["gpus"] if g["share"] == "kubernetes"]
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
        value = (_dig(obj, "metadata", "labels") or {}).get(LABEL_MIG_CONFIG)
        if value is not None and ("metadata", "labels", LABEL_MIG_CONFIG) in owned_field_paths(
            obj, node_manager
        ):
            lines.append(
                f"{node}: {LABEL_MIG_CONFIG}={value} was set by gpusplit and is no longer asked for; left in "
                "place (removing it would make the MIG manager apply its default config)"
            )
    return lines
