"""Render the cluster-side objects of a split plan from the Jinja2 templates in templates/.

One template per Kubernetes kind (templates/*.yaml.j2) is the single source of truth for the
shape of that object; this module computes the values, renders with a StrictUndefined
environment and parses the result with yaml.safe_load into plain dicts, ready for
kubernetes.core (server-side apply). No I/O besides reading the templates; no Ansible imports.

The device plugin image is pinned here, once: DEVICE_PLUGIN_IMAGE.
"""

from __future__ import annotations

import functools
import json
import os
import re
import urllib.parse

import jinja2
import yaml

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError
from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.names import (
    ANNOTATION_HOST,
    APP_NAME,
    LABEL_MODE,
    LABEL_NODE,
    MANAGED_BY,
    dns_label_name,
    label_value,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.names import (
    DNS_LABEL_RE as _DNS_LABEL_RE,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.names import (
    LABEL_VALUE_RE as _LABEL_VALUE_RE,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.scheduling import taint_text
from ansible_collections.gpusplit.k8s.plugins.module_utils._split.gc_pause import gc_paused
from ansible_collections.gpusplit.k8s.plugins.module_utils._split.modes import get_mode, mode_has
from ansible_collections.gpusplit.k8s.plugins.module_utils._split.planner import node_plans
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.settings import with_defaults
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.sharing_render import (
    CONFIG_DIR,
    CONFIG_FILE,
    CONFIG_FILE_NAME,
    config_text,
    daemonset_values,
    sharing_labels,
)

try:  # libyaml's loader when present: same result, much faster for 10k objects
    _YAML_LOADER = yaml.CSafeLoader
except AttributeError:  # pragma: no cover
    _YAML_LOADER = yaml.SafeLoader

DEVICE_PLUGIN_VERSION = "v0.20.0"
DEVICE_PLUGIN_IMAGE = "nvcr.io/nvidia/k8s-device-plugin:" + DEVICE_PLUGIN_VERSION

TEMPLATES_DIR = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "templates"
)

LABEL_SPLIT = "gpusplit.io/split"
LABEL_KUBERNETES_GPUS = "gpusplit.io/kubernetes-gpus"
LABEL_HOST_GPUS = "gpusplit.io/host-gpus"
LABEL_GPU_PRESENT = "nvidia.com/gpu.present"
LABEL_OPERATOR_DEVICE_PLUGIN = "nvidia.com/gpu.deploy.device-plugin"
ANNOTATION_NODE_NAME = "gpusplit.io/node-name"
ANNOTATION_GPU_TAINT = "gpusplit.io/gpu-taint"  # on a node: gpusplit set the GPU taint there
DAEMONSET_PREFIX = "gpusplit-dp-"
CONTAINER_NAME = "nvidia-device-plugin-ctr"  # the same name as the upstream static DaemonSet
DEVICE_PLUGIN_DIR = "/var/lib/kubelet/device-plugins"
CDI_DIR = "/var/run/cdi"
DRIVER_ROOT_IN_CONTAINER = "/driver-root"  # the plugin's default DRIVER_ROOT_CTR_PATH
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
EXCLUSION_EXPRESSION = {"key": LABEL_SPLIT, "operator": "NotIn", "values": ["true"]}

# hardening -> (DEVICE_LIST_STRATEGY, needs CAP_SYS_ADMIN, CDI)
HARDENING = {
    "envvar": ("envvar", False, False),
    "volume-mounts": ("volume-mounts", True, False),
    "cdi": ("cdi-annotations", False, True),
    "cdi-cri": ("cdi-cri", False, True),
}
NODE_PINNING = ("hostname", "node_name")

DEFAULT_SETTINGS = {
    "namespace": "kube-system",
    "create_namespace": True,  # only used when namespace is not kube-system
    "image": DEVICE_PLUGIN_IMAGE,
    "image_pull_policy": "IfNotPresent",
    "image_pull_secrets": [],
    "hardening": "volume-mounts",  # matches the toolkit hardening the gpu_host role applies by default
    "runtime_class_name": None,  # None: "nvidia" for cdi/cdi-cri, none otherwise; "" : never
    "priority_class_name": "system-node-critical",
    "pass_device_specs": False,
    "fail_on_init_error": True,
    "driver_root": "/",  # host path of the driver root, mounted for CDI spec generation
    "nvidia_cdi_hook_path": None,
    "resources": None,
    "extra_tolerations": [],
    "node_pinning": "hostname",  # nodeSelector kubernetes.io/hostname, or matchFields metadata.name
    "stock_plugin_name": "nvidia-device-plugin-daemonset",
    "stock_plugin_namespace": "kube-system",
}

_IMAGE_RE = re.compile(r"^[^\s]+$")


class RenderError(GpusplitError):
    """Bad settings or a plan that cannot be rendered."""


def mode_of(node_plan):
    """The mode table's entry for ``node_plan``; a mode the table does not have is refused (RenderError)."""
    try:
        return get_mode(node_plan.get("mode"), where=f"{node_plan.get('host')}: node plan")
    except GpusplitError as exc:
        raise RenderError(exc.errors) from None


# --------------------------------------------------------------------------------------------
# names


PRUNE_SCOPES = ("inventory", "plan")
# kube-apiserver answers 431 to a request line over 1 MiB (Go's http.DefaultMaxHeaderBytes); the prune's
# list request carries the selector URL-encoded. Measured on the lab: 15,000 values of 63 characters
# pass, 20,000 do not.
MAX_SELECTOR_BYTES = 1 << 20
_SELECTOR_MARGIN = 4096  # the rest of the request line and headers


def _prune_scope_name(scope):
    if scope not in PRUNE_SCOPES:
        raise RenderError(
            f"gpusplit_prune_scope: {scope!r} is not one of {', '.join(PRUNE_SCOPES)} (inventory: nodes gone "
            "from the inventory are cleaned up too; plan: only the nodes this run planned are touched)"
        )
    return scope


def prune_scope(base_selector, plan, inventory_nodes, scope="inventory"):
    """Which of gpusplit's per-node objects (split DaemonSets, host-share DeviceTaintRules) a run may prune.

    ``scope="inventory"``: a run decides about the nodes in its plan and about nodes gone from the
    inventory. A node that is still in the inventory but not in the plan (left out by ``--limit``,
    unreachable, failed discovery) keeps its objects: pruning them would hand its host GPUs to
    pods, or take its GPUs away from Kubernetes, without anyone having asked.
    ``scope="plan"``: the run decides only about the nodes in its plan (an AWX job slice, whose
    inventory holds only its own hosts): ``base_selector`` plus ``gpusplit.io/node in (...)``;
    an empty plan prunes nothing (selector None).

    Returns {"selector": the label selector for the prune (None: prune nothing), "kept": inventory
    nodes outside the plan, whose objects stay}.
    """
    scope = _prune_scope_name(scope)
    planned = {p["node"] for p in node_plans(plan)}
    kept = sorted({str(n) for n in inventory_nodes or [] if str(n) not in planned})
    if scope == "plan":
        values = ",".join(sorted({label_value(n) for n in planned}))
        selector = f"{base_selector},{LABEL_NODE} in ({values})" if planned else None
    elif kept:
        values = ",".join(sorted({label_value(n) for n in kept}))
        selector = f"{base_selector},{LABEL_NODE} notin ({values})"
    else:
        selector = base_selector
    size = len(urllib.parse.quote(selector or "", safe=""))
    if size > MAX_SELECTOR_BYTES - _SELECTOR_MARGIN:
        nodes = len(planned) if scope == "plan" else len(kept)
        raise RenderError(
            f"the prune's label selector names {nodes} nodes ({size} bytes URL-encoded, scope {scope}); "
            f"kube-apiserver refuses requests over {MAX_SELECTOR_BYTES} bytes. Run the split for fewer hosts at "
            "a time: --limit (scope inventory) or more job slices (scope plan)"
        )
    return {"selector": selector, "kept": kept}


def departed_nodes(live_nodes, plan, inventory_nodes, scope="inventory"):
    """Names of live nodes that carry gpusplit's labels but whose host left the inventory.

    Nodes in the plan get their labels from render_node_patches; nodes of inventory hosts outside
    this run are left alone (see prune_scope). What is left are nodes gpusplit labelled once and
    nobody plans any more. With ``scope="plan"`` the run knows no more than its plan: none.
    """
    if _prune_scope_name(scope) == "plan":
        return []
    keep = {p["node"] for p in node_plans(plan)} | {str(n) for n in inventory_nodes or []}
    out = []
    for node in live_nodes or []:
        meta = node.get("metadata") or {}
        if LABEL_SPLIT in (meta.get("labels") or {}) and meta.get("name") not in keep:
            out.append(meta["name"])
    return sorted(out)


def render_release_patches(names):
    """Node objects carrying nothing of gpusplit's: applied under gpusplit's field manager, they
    take away every label and annotation gpusplit set there (labels others set stay)."""
    return [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": str(n)}} for n in names]


def daemonset_name(node):
    """``gpusplit-dp-<node>``, DNS-1123 and at most 63 characters."""
    return dns_label_name(DAEMONSET_PREFIX, node)


# --------------------------------------------------------------------------------------------
# settings and the Jinja2 environment


def resolve_settings(settings=None):
    """Defaults + ``settings`` (None values mean the default); refuse unknown keys and bad values."""
    out = with_defaults(settings, DEFAULT_SETTINGS, "settings", RenderError)
    problems = []
    if not isinstance(out["namespace"], str) or not _DNS_LABEL_RE.match(out["namespace"]):
        problems.append(f"settings.namespace {out['namespace']!r} is not a DNS-1123 label")
    if out["hardening"] not in HARDENING:
        problems.append(f"settings.hardening {out['hardening']!r} is not one of {', '.join(HARDENING)}")
    if not isinstance(out["image"], str) or not _IMAGE_RE.match(out["image"]):
        problems.append(f"settings.image {out['image']!r} is not an image reference")
    if out["image_pull_policy"] not in ("Always", "IfNotPresent", "Never"):
        problems.append(
            f"settings.image_pull_policy {out['image_pull_policy']!r} is not Always|IfNotPresent|Never"
        )
    if out["node_pinning"] not in NODE_PINNING:
        problems.append(
            f"settings.node_pinning {out['node_pinning']!r} is not one of {', '.join(NODE_PINNING)}"
        )
    for key in ("pass_device_specs", "fail_on_init_error", "create_namespace"):
        if not isinstance(out[key], bool):
            problems.append(f"settings.{key} {out[key]!r} is not a boolean")
    for key in ("image_pull_secrets", "extra_tolerations"):
        if not isinstance(out[key], list | tuple):
            problems.append(f"settings.{key} {out[key]!r} is not a list")
    if out["resources"] is not None and not isinstance(out["resources"], dict):
        problems.append(f"settings.resources {out['resources']!r} is not a mapping")
    if problems:
        raise RenderError("; ".join(problems))
    return out


def _to_yaml_scalar(value):
    """JSON is YAML: every value goes into the templates quoted this way (no injection)."""
    return json.dumps(value, ensure_ascii=True)


@functools.lru_cache(maxsize=4)
def _environment(templates_dir):
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(templates_dir),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["q"] = _to_yaml_scalar
    return env


def render_template(template, /, **context):
    """Render templates/<template> and parse it into one dict."""
    text = _environment(TEMPLATES_DIR).get_template(template).render(**context)
    obj = yaml.load(text, Loader=_YAML_LOADER)  # a SafeLoader (libyaml or pure Python)
    if not isinstance(obj, dict):
        raise RenderError(f"template {template} did not render a mapping")
    return obj


_SHAPES = {}
_SHAPES_MAX = 256


def _placeholder(key):
    return f"@@gpusplit:{key}@@"


def _fill(obj, values):
    if isinstance(obj, dict):
        return {k: _fill(v, values) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_fill(v, values) for v in obj]
    if isinstance(obj, str) and obj in values:
        return values[obj]
    return obj


def render_template_per_node(template, variables, invariants):
    """Like render_template, for many objects that differ only in whole string values.

    The template is rendered and parsed once per distinct ``invariants`` with placeholders
    for ``variables`` (each used only as a whole scalar in the template), then copied with the
    real values filled in: the same result as rendering each one, several times faster.
    """
    key = (template, json.dumps(invariants, sort_keys=True, default=str))
    shape = _SHAPES.get(key)
    if shape is None:
        if len(_SHAPES) >= _SHAPES_MAX:
            _SHAPES.clear()
        obj = render_template(template, **invariants, **{k: _placeholder(k) for k in variables})
        # the shape as JSON text, filled by replacing each placeholder's JSON string: C speed, the same
        # result as _fill where the object goes through JSON unchanged and no mapping key is a
        # placeholder (else _fill walks the object)
        try:
            text = json.dumps(obj)
        except (TypeError, ValueError):
            text = None
        if text is not None and (
            json.loads(text) != obj or any(f'"{_placeholder(k)}":' in text for k in variables)
        ):
            text = None
        shape = (obj, text)
        _SHAPES[key] = shape
    obj, text = shape
    if text is None:
        return _fill(obj, {_placeholder(k): str(v) for k, v in variables.items()})
    for k, v in variables.items():
        text = text.replace(json.dumps(_placeholder(k)), json.dumps(str(v)))
    return json.loads(text)


# --------------------------------------------------------------------------------------------
# node labels and taints


def node_labels(node_plan, operator_managed=False):
    """The labels gpusplit sets on the node of ``node_plan`` (values are strings).

    ``operator_managed``: the GPU Operator runs in the cluster, so its device plugin must be
    switched off on every split node, whatever the mode (it always is in a mode whose table entry
    says operator_managed, such as gpu_operator).
    """
    labels = {}
    if node_plan["gpu_count"]:
        labels[LABEL_GPU_PRESENT] = "true"
    labels[LABEL_SPLIT] = "true" if node_plan["split"] else "false"
    labels[LABEL_MODE] = node_plan["mode"]
    labels[LABEL_KUBERNETES_GPUS] = str(node_plan["kubernetes_count"])
    labels[LABEL_HOST_GPUS] = str(node_plan["host_count"])
    if node_plan["split"] and (operator_managed or mode_has(node_plan.get("mode"), "operator_managed")):
        labels[LABEL_OPERATOR_DEVICE_PLUGIN] = "false"
    labels.update(sharing_labels(node_plan))
    return labels


def node_taints(node_plan, taint_enabled):
    """``[nvidia.com/gpu=present:NoSchedule]`` for a node with Kubernetes GPUs when enabled.

    A node plan whose mode the table does not have is refused (RenderError), enabled or not.
    """
    mode_of(node_plan)
    if taint_enabled and node_plan["kubernetes_count"] > 0:
        return [dict(GPU_TAINT)]
    return []


def node_annotations(node_plan, gpu_taint=False):
    """The annotations gpusplit sets on the node of ``node_plan``.

    ``gpusplit.io/gpu-taint`` marks a node that gets the GPU taint from gpusplit (gpu_taint on
    and a Kubernetes share): it is applied with the node's labels, so it goes away (server-side
    apply, a field no longer sent) in the run that stops tainting the node, and that run's
    gpu_taint_removals, computed from the nodes as they were before, takes the taint off.
    """
    annotations = {ANNOTATION_HOST: node_plan["host"]}
    if node_taints(node_plan, gpu_taint):
        annotations[ANNOTATION_GPU_TAINT] = taint_text(GPU_TAINT)
    return annotations


def render_node_patch(node_plan, operator_managed=False, gpu_taint=False):
    """A Node object carrying only gpusplit's labels and annotations (for server-side apply)."""
    return render_template(
        "node.yaml.j2",
        node=node_plan["node"],
        labels=node_labels(node_plan, operator_managed),
        annotations=node_annotations(node_plan, gpu_taint),
    )


def render_node_patches(plan, operator_managed=False, gpu_taint=False):
    return [render_node_patch(p, operator_managed, gpu_taint) for p in node_plans(plan)]


def has_gpu_taint(live_node):
    """The live node carries nvidia.com/gpu=present:NoSchedule."""
    taints = ((live_node or {}).get("spec") or {}).get("taints") or []
    return any(
        t.get("key") == GPU_TAINT["key"]
        and t.get("effect") == GPU_TAINT["effect"]
        and (t.get("value") or "") == GPU_TAINT["value"]
        for t in taints
    )


def gpu_taint_removals(live_nodes, plan, taint_enabled, inventory_nodes=None, scope="inventory"):
    """Names of the live nodes whose GPU taint gpusplit set and must now take off.

    ``live_nodes``: the nodes as they were before this run applied its node patches (their
    ``gpusplit.io/gpu-taint`` annotation says gpusplit set the taint). A node loses the taint when
    it still has it, gpusplit set it, and either it is planned in this run and no longer gets it
    (``taint_enabled`` off, or its Kubernetes share dropped to 0), or its host left the inventory.
    A taint that someone else set (no annotation) is never touched, and nodes of inventory hosts
    outside this run (--limit, unreachable) are left as they are (see prune_scope). With
    ``scope="plan"`` only planned nodes lose it: a node outside the plan is never "departed".
    """
    plan_only = _prune_scope_name(scope) == "plan"
    planned = {p["node"]: p for p in node_plans(plan)}
    inventory = {str(n) for n in inventory_nodes or []}
    out = []
    for node in live_nodes or []:
        meta = node.get("metadata") or {}
        name = meta.get("name")
        if ANNOTATION_GPU_TAINT not in (meta.get("annotations") or {}) or not has_gpu_taint(node):
            continue
        if name in planned:
            if not node_taints(planned[name], taint_enabled):
                out.append(name)
        elif name not in inventory and not plan_only:
            out.append(name)
    return sorted(out)


def gpu_taint_nodes(live_nodes, plan, taint_enabled, inventory_nodes=None, scope="inventory"):
    """The GPU taint's changes for the module node_taints, one step for the fleet: ``{name, present}`` for
    every planned node that gets the taint (:func:`node_taints`) and, in ``live_nodes`` (this run's read),
    does not have it yet; then ``{name, absent}`` for every live node that loses it
    (:func:`gpu_taint_removals`, same arguments). Empty when nothing changes, so that an unchanged fleet
    costs no module execution."""
    tainted = {(n.get("metadata") or {}).get("name") for n in live_nodes or [] if has_gpu_taint(n)}
    present = [
        {"name": p["node"], "present": node_taints(p, taint_enabled)}
        for p in node_plans(plan)
        if node_taints(p, taint_enabled) and p["node"] not in tainted
    ]
    removals = gpu_taint_removals(live_nodes, plan, taint_enabled, inventory_nodes, scope)
    return present + [{"name": name, "absent": [dict(GPU_TAINT)]} for name in removals]


# --------------------------------------------------------------------------------------------
# the per-node split device plugin


def _daemonset_context(node_plan, s):
    """(per-node string values, everything else) for templates/daemonset.yaml.j2."""
    node = node_plan["node"]
    mig_strategy = node_plan["mig_strategy"]
    list_strategy, sys_admin, cdi = HARDENING[s["hardening"]]
    mig = mig_strategy != "none"
    runtime_class = s["runtime_class_name"]
    if runtime_class is None:
        runtime_class = "nvidia" if cdi else ""
    hostname_ok = len(node) <= 63 and _LABEL_VALUE_RE.match(node) is not None
    variables = {
        "name": daemonset_name(node),
        "node": node,
        "host": node_plan["host"],
        "node_label": label_value(node),
        "visible_devices": ",".join(node_plan["kubernetes_uuids"]),
    }
    plugin_config, sharing_values = daemonset_values(node_plan, daemonset_name(node))
    variables.update(sharing_values)
    return variables, {
        "plugin_config": plugin_config,
        "config_file": CONFIG_FILE,
        "config_dir": CONFIG_DIR,
        "namespace": s["namespace"],
        "managed_by": MANAGED_BY,
        "app_name": APP_NAME,
        "pin_by_hostname": s["node_pinning"] == "hostname" and hostname_ok,
        "image": s["image"],
        "image_pull_policy": s["image_pull_policy"],
        "image_pull_secrets": [{"name": n} if isinstance(n, str) else n for n in s["image_pull_secrets"]],
        "priority_class_name": s["priority_class_name"],
        "runtime_class_name": runtime_class,
        "extra_tolerations": list(s["extra_tolerations"]),
        "resources": s["resources"],
        "mig_strategy": mig_strategy,
        "device_list_strategy": list_strategy,
        "pass_device_specs": "true" if s["pass_device_specs"] else "false",
        "fail_on_init_error": "true" if s["fail_on_init_error"] else "false",
        # the chart adds SYS_ADMIN and NVIDIA_MIG_MONITOR_DEVICES=all for any MIG strategy but none
        "sys_admin": sys_admin or mig,
        "mig_monitor": mig,
        "cdi": cdi,
        "driver_root": s["driver_root"],
        "driver_root_in_container": DRIVER_ROOT_IN_CONTAINER,
        "cdi_hook_path": s["nvidia_cdi_hook_path"] or "",
        "container_name": CONTAINER_NAME,
        "device_plugin_dir": DEVICE_PLUGIN_DIR,
        "cdi_dir": CDI_DIR,
    }


def render_split_daemonset(node_plan, settings=None):
    """The per-node split device plugin DaemonSet (apps/v1) for one node plan."""
    s = resolve_settings(settings)
    return _render_daemonset(node_plan, s)


def _render_daemonset(node_plan, s):
    host = node_plan.get("host")
    if not mode_has(node_plan.get("mode"), "split_plugin"):
        raise RenderError(f"{host}: mode {node_plan.get('mode')!r} runs no split device plugin")
    if not node_plan.get("kubernetes_uuids"):
        raise RenderError(f"{host}: the Kubernetes share is empty; no device plugin to render")
    variables, invariants = _daemonset_context(node_plan, s)
    return render_template_per_node("daemonset.yaml.j2", variables, invariants)


def render_daemonsets(plan, settings=None):
    """One DaemonSet per node whose mode runs the split plugin (device_plugin, gpu_operator) and that
    has Kubernetes GPUs."""
    s = resolve_settings(settings)
    out = []
    seen = {}
    for node_plan in node_plans(plan):
        if not mode_of(node_plan).split_plugin or not node_plan["kubernetes_uuids"]:
            continue
        ds = _render_daemonset(node_plan, s)
        name = ds["metadata"]["name"]
        if name in seen:
            raise RenderError(f"{node_plan['host']}: DaemonSet name {name} is also the name for {seen[name]}")
        seen[name] = node_plan["host"]
        out.append(ds)
    return out


def render_config_maps(plan, settings=None):
    """The device plugin's config file (a ConfigMap named like the node's DaemonSet) for each node whose split
    plugin shares the Kubernetes share (plugin_utils/sharing_render.py)."""
    s = resolve_settings(settings)
    out = []
    for node_plan in node_plans(plan):
        if not mode_of(node_plan).split_plugin or not node_plan["kubernetes_uuids"]:
            continue
        text = config_text(node_plan)
        if text is None:
            continue
        node = node_plan["node"]
        out.append(
            render_template(
                "configmap.yaml.j2",
                name=daemonset_name(node),
                namespace=s["namespace"],
                managed_by=MANAGED_BY,
                app_name=APP_NAME,
                node=node,
                node_label=label_value(node),
                host=node_plan["host"],
                file_name=CONFIG_FILE_NAME,
                config=text,
            )
        )
    return out


def render_namespace(settings=None):
    s = resolve_settings(settings)
    return render_template("namespace.yaml.j2", name=s["namespace"], managed_by=MANAGED_BY)


@gc_paused
def render_fleet(plan, settings=None):
    """Every cluster-side object of the split plugins, in apply order.

    The Namespace (when it is not kube-system and create_namespace), then one DaemonSet per
    node whose mode runs the split plugin (the mode table's ``split_plugin``: device_plugin,
    gpu_operator) and that has Kubernetes GPUs. Nodes in other modes (none, dra) get no object
    here (their labels: render_node_patches; DRA taints: _dra). A node whose Kubernetes share is shared
    gets its plugin's config file first (a ConfigMap, render_config_maps), which its DaemonSet mounts.
    """
    s = resolve_settings(settings)
    objects = []
    if s["namespace"] != "kube-system" and s["create_namespace"]:
        objects.append(render_template("namespace.yaml.j2", name=s["namespace"], managed_by=MANAGED_BY))
    objects.extend(render_config_maps(plan, s))
    objects.extend(render_daemonsets(plan, s))
    return objects


# --------------------------------------------------------------------------------------------
# keeping a stock cluster-wide plugin off the split nodes


def _existing_terms(existing):
    if not existing:
        return []
    spec = existing
    if "spec" in existing and existing.get("kind") == "DaemonSet":
        spec = (((existing.get("spec") or {}).get("template") or {}).get("spec")) or {}
    if "affinity" in spec:
        spec = spec.get("affinity") or {}
    if "nodeAffinity" in spec:
        spec = spec.get("nodeAffinity") or {}
    required = spec.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    return list(required.get("nodeSelectorTerms") or [])


def exclusion_terms(existing=None):
    """nodeSelectorTerms that keep the existing terms and add ``gpusplit.io/split NotIn [true]``.

    Terms are ORed and expressions inside a term ANDed, so the expression goes into every
    term: (t1 or t2) and not-split. Idempotent (an expression already there is not repeated).
    """
    terms = _existing_terms(existing)
    if not terms:
        return [{"matchExpressions": [dict(EXCLUSION_EXPRESSION)]}]
    out = []
    for term in terms:
        term = dict(term)
        exprs = list(term.get("matchExpressions") or [])
        if EXCLUSION_EXPRESSION not in exprs:
            exprs.append(dict(EXCLUSION_EXPRESSION))
        term["matchExpressions"] = exprs
        out.append(term)
    return out


def render_stock_plugin_exclusion(settings=None, existing=None):
    """A DaemonSet patch for the stock cluster-wide plugin: never on a node labelled split.

    ``existing``: the live DaemonSet (or its pod spec / affinity / nodeAffinity). nodeSelectorTerms
    is replaced as a whole by a patch, so pass it to keep the terms it already has.
    """
    s = resolve_settings(settings)
    return render_template(
        "stock_plugin_exclusion.yaml.j2",
        name=s["stock_plugin_name"],
        namespace=s["stock_plugin_namespace"],
        terms=exclusion_terms(existing),
    )
