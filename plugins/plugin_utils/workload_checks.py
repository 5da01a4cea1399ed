# Copyright: gpusplit contributors
# Apache-2.0
"""Lint GPU workloads before they reach the cluster, and render the admission guard.

Pure functions over manifests as dicts (Pod, PodTemplate, Deployment, StatefulSet, DaemonSet,
ReplicaSet, ReplicationController, Job, CronJob, and List of those); ``read_manifests`` reads them
from files (paths or globs), refusing a path that matches nothing and a file that is not YAML.
Each finding names the object, the container, the rule and the fix. The rules:

* ``extended-resource-requests-equal-limits``: an extended resource (``nvidia.com/gpu``,
  ``amd.com/gpu``, ``example.com/foo``: any name with a domain outside ``*kubernetes.io/``, see
  ``is_extended_resource``) may not be overcommitted, so requests must equal limits (a request
  without a limit is refused too); kube-apiserver rejects the pod otherwise ("must be equal to
  nvidia.com/gpu limit").
* ``extended-resource-integer``: its amount must be a whole number ("must be an integer").
* ``visible-devices-env``: ``NVIDIA_VISIBLE_DEVICES`` or ``NVIDIA_DRIVER_CAPABILITIES`` set in a
  container's env outside the allowed namespaces: with the default runtime settings a pod can
  grab GPUs (even the host's share) by setting ``NVIDIA_VISIBLE_DEVICES`` without requesting any.
  ``cuda-visible-devices-env`` (a warning): ``CUDA_VISIBLE_DEVICES`` only selects among the GPUs
  the container already has (the CUDA runtime reads it inside the container; it reaches no other
  device), but it can hide GPUs the pod was given. ``visible-devices-env-from`` (a warning): an
  ``envFrom`` source whose keys the lint cannot see could set these names.
* ``gpu-taint-toleration``: when the fleet taints its GPU nodes (nvidia.com/gpu=present:NoSchedule),
  a pod that requests GPUs (``nvidia.com/gpu*``, ``nvidia.com/mig-*``) or gets devices through DRA
  (a pod-level ``resourceClaims`` entry that a container names in ``resources.claims``) must
  tolerate that taint or it stays Pending.
* ``runtime-class-nvidia``: ``runtimeClassName: nvidia`` (the CDI gate) only in allowed namespaces.

The admission guard (templates/validatingadmissionpolicy.yaml.j2 and
templates/validatingadmissionpolicybinding.yaml.j2) enforces the env rule for
``NVIDIA_VISIBLE_DEVICES`` in the cluster itself, and refuses volumes mounted where the container
toolkit reads a device list (``/var/run/nvidia-container-devices``); ``guard_objects`` renders it.
"""

from __future__ import annotations

import re

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError, type_name
from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.names import (
    LABEL_MANAGED_BY,
    LABEL_NAME,
    MANAGED_BY,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.quantity import parse_quantity
from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.scheduling import is_gpu_resource, tolerates
from ansible_collections.gpusplit.k8s.plugins.module_utils._split.sharing import SHARED_SUFFIX
from ansible_collections.gpusplit.k8s.plugins.plugin_utils import split_render as render
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.settings import with_defaults

NATIVE_DOMAIN = "kubernetes.io/"  # kubernetes.io/ and every *.kubernetes.io/ name is native
QUOTA_PREFIX = "requests."  # quota names, never a container resource
HUGEPAGES_PREFIX = "hugepages-"
VISIBILITY_ENV = ("NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES")  # read by the runtime, on the host
SELECTION_ENV = ("CUDA_VISIBLE_DEVICES",)  # read by CUDA inside the container: a subset of its GPUs
DEFAULT_ALLOWED_NAMESPACES = ("kube-system", "gpu-operator")
GPU_TAINT = dict(render.GPU_TAINT)
ERROR, WARNING = "error", "warning"

RULES = {
    "extended-resource-requests-equal-limits": ERROR,
    "extended-resource-integer": ERROR,
    "shared-gpu-more-than-one": WARNING,
    "visible-devices-env": ERROR,
    "cuda-visible-devices-env": WARNING,
    "visible-devices-env-from": WARNING,
    "gpu-taint-toleration": ERROR,
    "runtime-class-nvidia": ERROR,
}

# kind -> path to the pod spec
_POD_SPEC_PATHS = {
    "Pod": ("spec",),
    "PodTemplate": ("template", "spec"),
    "Deployment": ("spec", "template", "spec"),
    "StatefulSet": ("spec", "template", "spec"),
    "DaemonSet": ("spec", "template", "spec"),
    "ReplicaSet": ("spec", "template", "spec"),
    "ReplicationController": ("spec", "template", "spec"),
    "Job": ("spec", "template", "spec"),
    "CronJob": ("spec", "jobTemplate", "spec", "template", "spec"),
}
_CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")


class LintError(GpusplitError):
    """Bad options (not bad manifests: those are findings)."""


def pod_spec(obj):
    """The pod spec inside a workload manifest, or None for other kinds."""
    path = _POD_SPEC_PATHS.get((obj or {}).get("kind"))
    if not path:
        return None
    cur = obj
    for key in path:
        cur = (cur or {}).get(key)
        if not isinstance(cur, dict):
            return None
    return cur


def _objects(manifests, where, problems):
    """The Kubernetes objects in ``manifests`` (Lists unpacked); what is not one goes to ``problems``."""
    for i, obj in enumerate(manifests):
        at = f"{where}[{i}]"
        if obj is None:  # an empty YAML document
            continue
        if not isinstance(obj, dict):
            problems.append(f"{at}: expected a Kubernetes object (a mapping), {_got(obj)}")
            continue
        kind = obj.get("kind")
        if kind is None:
            problems.append(f"{at}: {_safe_name(obj)} has no kind; every Kubernetes object names its kind")
        elif isinstance(kind, str) and kind.endswith("List") and "items" in obj:
            items = obj.get("items")
            if items is None:
                continue
            if not isinstance(items, list):
                problems.append(f"{at}: {_safe_name(obj)}: items: expected a list, {_got(items)}")
                continue
            yield from _objects(items, f"{at}.items", problems)
        else:
            yield obj


def _manifest_list(manifests):
    """``manifests`` as a list of objects (one mapping is one object); other shapes are refused."""
    if isinstance(manifests, dict):
        return [manifests]
    if isinstance(manifests, str):
        raise LintError(
            "manifests: expected Kubernetes objects (a list of mappings), got a string; "
            "parse YAML text first (from_yaml_all), or read files with gpusplit.k8s.workload_manifests"
        )
    if not isinstance(manifests, (list, tuple)):
        raise LintError(f"manifests: expected a list of Kubernetes objects (mappings), {_got(manifests)}")
    return list(manifests)


def _names(value, field):
    """A list of names from a list of strings (or one string: one name); other shapes are refused."""
    if isinstance(value, str):
        return [value]
    if value is None:
        return []
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise LintError(f"{field}: expected a list of names, {_got(value)} {value!r}")
    return list(value)


def _check_options(gpu_taint, default_namespace, check_env_from):
    if gpu_taint is True:
        gpu_taint = dict(GPU_TAINT)
    if gpu_taint and not (isinstance(gpu_taint, dict) and gpu_taint.get("key") and gpu_taint.get("effect")):
        raise LintError(f"gpu_taint: expected a taint with key and effect, or true/false, got {gpu_taint!r}")
    if not isinstance(default_namespace, str) or not default_namespace:
        raise LintError(f"default_namespace: expected a namespace name, {_got(default_namespace)}")
    if not isinstance(check_env_from, bool):
        raise LintError(f"check_env_from: expected true or false, {_got(check_env_from)}")
    return gpu_taint


def _got(value):
    return f"got {type_name(value)}"


def _list_of_mappings_problems(value, field):
    """What is wrong with a list of mappings at ``field`` (empty when nothing)."""
    if value is None:
        return []
    if not isinstance(value, list):
        return [f"{field}: expected a list, {_got(value)}"]
    return [
        f"{field}[{i}]: expected a mapping, {_got(item)}"
        for i, item in enumerate(value)
        if not isinstance(item, dict)
    ]


def _container_problems(container, field):
    if not isinstance(container, dict):
        return [f"{field}: expected a mapping, {_got(container)}"]
    problems = _list_of_mappings_problems(container.get("env"), f"{field}.env")
    env_from = container.get("envFrom")
    problems += _list_of_mappings_problems(env_from, f"{field}.envFrom")
    for i, src in enumerate(env_from if isinstance(env_from, list) else []):
        if not isinstance(src, dict):
            continue
        if not isinstance(src.get("prefix") or "", str):
            problems.append(f"{field}.envFrom[{i}].prefix: expected a string, {_got(src['prefix'])}")
        for ref in ("configMapRef", "secretRef"):
            if src.get(ref) is not None and not isinstance(src[ref], dict):
                problems.append(f"{field}.envFrom[{i}].{ref}: expected a mapping, {_got(src[ref])}")
    res = container.get("resources")
    if res is None:
        return problems
    if not isinstance(res, dict):
        return problems + [f"{field}.resources: expected a mapping, {_got(res)}"]
    for section in ("requests", "limits"):
        if res.get(section) is not None and not isinstance(res[section], dict):
            problems.append(f"{field}.resources.{section}: expected a mapping, {_got(res[section])}")
    problems += _list_of_mappings_problems(res.get("claims"), f"{field}.resources.claims")
    for i, ref in enumerate(res["claims"] if isinstance(res.get("claims"), list) else []):
        problems += _name_problem(ref, f"{field}.resources.claims[{i}]")
    return problems


def _name_problem(item, field):
    """A list entry's ``name`` that is not a string (empty when it is one, or the entry is no mapping)."""
    name = item.get("name") if isinstance(item, dict) else None
    if name is None or isinstance(name, str):
        return []
    return [f"{field}.name: expected a string, {_got(name)}"]


def shape_problems(obj):
    """What in a manifest is not shaped as Kubernetes has it, where the lint reads it.

    Each message names the object (``<kind>/<namespace>/<name>``) and the field.
    """
    kind, meta = obj.get("kind"), obj.get("metadata")
    if not isinstance(kind, (str, type(None))):
        return [f"{_safe_name(obj)}: kind: expected a string, {_got(kind)}"]
    if not isinstance(meta, (dict, type(None))):
        return [f"{_safe_name(obj)}: metadata: expected a mapping, {_got(meta)}"]
    if not isinstance((meta or {}).get("namespace"), (str, type(None))):
        return [f"{_safe_name(obj)}: metadata.namespace: expected a string, {_got(meta['namespace'])}"]
    path = _POD_SPEC_PATHS.get(kind)
    if not path:
        return []
    name, cur = object_name(obj), obj
    for depth, key in enumerate(path):
        cur = cur.get(key)
        if cur is None:
            return []  # no pod spec: nothing to lint, as before
        if not isinstance(cur, dict):
            return [f"{name}: {'.'.join(path[: depth + 1])}: expected a mapping, {_got(cur)}"]
    where = ".".join(path)
    problems = []
    for list_name in _CONTAINER_LISTS:
        containers = cur.get(list_name)
        if containers is None:
            continue
        if not isinstance(containers, list):
            problems.append(f"{where}.{list_name}: expected a list of containers, {_got(containers)}")
            continue
        for i, container in enumerate(containers):
            problems += _container_problems(container, f"{where}.{list_name}[{i}]")
    problems += _list_of_mappings_problems(cur.get("tolerations"), f"{where}.tolerations")
    problems += _list_of_mappings_problems(cur.get("resourceClaims"), f"{where}.resourceClaims")
    for i, claim in enumerate(cur["resourceClaims"] if isinstance(cur.get("resourceClaims"), list) else []):
        problems += _name_problem(claim, f"{where}.resourceClaims[{i}]")
    return [f"{name}: {problem}" for problem in problems]


def _safe_name(obj):
    """object_name for a manifest whose kind or metadata may be of the wrong type."""
    kind = obj.get("kind") if isinstance(obj.get("kind"), str) else "?"
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    ns = meta.get("namespace") if isinstance(meta.get("namespace"), str) else None
    return f"{kind}/{ns + '/' if ns else ''}{meta.get('name') or '(unnamed)'}"


def object_name(obj):
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{obj.get('kind')}/{ns + '/' if ns else ''}{meta.get('name') or '(unnamed)'}"


def _finding(obj, container, rule, message, fix):
    return {
        "object": object_name(obj),
        "kind": obj.get("kind"),
        "namespace": (obj.get("metadata") or {}).get("namespace"),
        "name": (obj.get("metadata") or {}).get("name"),
        "container": container,
        "rule": rule,
        "severity": RULES[rule],
        "message": message,
        "fix": fix,
    }


def is_extended_resource(name):
    """Whether kube-apiserver treats a container resource name as an extended resource.

    Kubernetes' rule (IsExtendedResourceName in k8s.io/kubernetes pkg/apis/core/helper): the
    name has a domain (a "/"), the domain is not in the kubernetes.io namespace (the name does
    not contain "kubernetes.io/"), and it does not start with "requests.". Those may not be
    overcommitted and must be integers. Unprefixed names (cpu, memory, ephemeral-storage,
    hugepages-2Mi) are native.
    """
    name = str(name)
    return (
        "/" in name
        and NATIVE_DOMAIN not in name
        and not name.startswith(QUOTA_PREFIX)
        and not name.startswith(HUGEPAGES_PREFIX)
    )


def _integer_fix(resource):
    fix = f"use a whole number, e.g. {resource}: 1"
    if is_gpu_resource(resource):
        fix += (
            " (for a share of a GPU: MIG devices, gpusplit_mig_strategy single or mixed, or time-sliced "
            "replicas of the Kubernetes share, gpusplit_sharing; docs/sharing.md)"
        )
    return fix


def _resource_findings(obj, kind_of_list, container):
    out = []
    name = container.get("name")
    where = f"{kind_of_list[:-1]} {name}"
    res = container.get("resources") or {}
    requests = res.get("requests") or {}
    limits = res.get("limits") or {}
    for resource in sorted(set(requests) | set(limits)):
        if not is_extended_resource(resource):
            continue
        req, lim = requests.get(resource), limits.get(resource)
        for label, value in (("request", req), ("limit", lim)):
            if value is None:
                continue
            q = parse_quantity(value)
            if q is None or q.denominator != 1 or q < 0:
                out.append(
                    _finding(
                        obj,
                        name,
                        "extended-resource-integer",
                        f"{where}: {resource} {label} {value!r} is not a whole number; "
                        "an extended resource is counted in whole units",
                        _integer_fix(resource),
                    )
                )
        amount = parse_quantity(lim if lim is not None else req)
        if (
            resource.endswith(SHARED_SUFFIX)
            and is_gpu_resource(resource)
            and amount is not None
            and amount > 1
        ):
            out.append(
                _finding(
                    obj,
                    name,
                    "shared-gpu-more-than-one",
                    f"{where}: asks for {lim if lim is not None else req} {resource}: replicas of a time-sliced GPU "
                    "give no more compute than one (they may all be one GPU), and a node whose device plugin "
                    "fails requests greater than one fails the container (UnexpectedAdmissionError)",
                    f"ask for {resource}: 1, or for whole GPUs (nvidia.com/gpu) on a node that does not share them",
                )
            )
        if req is not None and lim is None:
            out.append(
                _finding(
                    obj,
                    name,
                    "extended-resource-requests-equal-limits",
                    f"{where}: {resource} has a request ({req}) but no limit; extended resources cannot be overcommitted",
                    f"set resources.limits.{resource}: {req} (or only the limit: the request defaults to it)",
                )
            )
        elif req is not None and parse_quantity(req) != parse_quantity(lim):
            out.append(
                _finding(
                    obj,
                    name,
                    "extended-resource-requests-equal-limits",
                    f"{where}: {resource} request {req} differs from limit {lim}",
                    f"make them equal (resources.requests.{resource} = resources.limits.{resource}) or drop the request",
                )
            )
    return out


def _gpu_amount(spec):
    total = 0
    for list_name in ("initContainers", "containers"):
        for c in spec.get(list_name) or []:
            res = c.get("resources") or {}
            for section in ("limits", "requests"):
                for resource, value in (res.get(section) or {}).items():
                    if is_gpu_resource(resource):
                        q = parse_quantity(value)
                        total = max(total, q or 0)
    return total


def dra_claims(spec):
    """The pod-level resourceClaims (DRA) that a container or init container names in
    ``resources.claims``, in the pod's order: the pod gets devices through them."""
    used = set()
    for list_name in ("initContainers", "containers"):
        for c in spec.get(list_name) or []:
            for ref in (c.get("resources") or {}).get("claims") or []:
                if isinstance(ref, dict) and ref.get("name"):
                    used.add(ref["name"])
    return [
        rc["name"]
        for rc in spec.get("resourceClaims") or []
        if isinstance(rc, dict) and rc.get("name") in used
    ]


def lint(
    manifests,
    allowed_namespaces=DEFAULT_ALLOWED_NAMESPACES,
    gpu_taint=None,
    default_namespace="default",
    visibility_env=VISIBILITY_ENV,
    check_env_from=True,
    selection_env=SELECTION_ENV,
):
    """[finding] for every manifest (parsed objects: a list of mappings, or one mapping).

    ``gpu_taint``: the fleet's GPU taint (a dict key/value/effect, or True for
    nvidia.com/gpu=present:NoSchedule) when the fleet taints its GPU nodes; None/False otherwise.
    Input that is not a list of Kubernetes objects (YAML text, an item that is not a mapping or
    has no kind) is refused, never skipped.
    """
    gpu_taint = _check_options(gpu_taint, default_namespace, check_env_from)
    allowed = set(_names(allowed_namespaces, "allowed_namespaces"))
    names = tuple(_names(visibility_env, "visibility_env"))
    selection = tuple(n for n in _names(selection_env, "selection_env") if n not in names)
    watched = names + selection
    problems = []
    objects = list(_objects(_manifest_list(manifests), "manifests", problems))
    problems += [problem for obj in objects for problem in shape_problems(obj)]
    if problems:
        raise LintError(problems)
    findings = []
    for obj in objects:
        spec = pod_spec(obj)
        if spec is None:
            continue
        ns = (obj.get("metadata") or {}).get("namespace") or default_namespace
        privileged_ns = ns in allowed
        for list_name in _CONTAINER_LISTS:
            for c in spec.get(list_name) or []:
                findings.extend(_resource_findings(obj, list_name, c))
                if privileged_ns:
                    continue
                for env in c.get("env") or []:
                    if env.get("name") in selection:
                        findings.append(
                            _finding(
                                obj,
                                c.get("name"),
                                "cuda-visible-devices-env",
                                f"{list_name[:-1]} {c.get('name')} sets {env['name']} in namespace {ns}: "
                                "it selects among the GPUs the container was given (it reaches no other GPU), "
                                "but it can hide some of them from the workload",
                                f"remove {env['name']} unless the container means to use a subset of its GPUs",
                            )
                        )
                    elif env.get("name") in names:
                        findings.append(
                            _finding(
                                obj,
                                c.get("name"),
                                "visible-devices-env",
                                f"{list_name[:-1]} {c.get('name')} sets {env['name']} in namespace {ns}: "
                                "GPU visibility is the device plugin's job, not the pod's",
                                f"remove {env['name']} and request GPUs as resources (limits.nvidia.com/gpu); "
                                f"only {', '.join(sorted(allowed)) or 'no namespace'} may set it",
                            )
                        )
                if check_env_from:
                    for src in c.get("envFrom") or []:
                        prefix = src.get("prefix") or ""
                        if not any(n.startswith(prefix) for n in watched):
                            continue
                        ref = src.get("configMapRef") or src.get("secretRef") or {}
                        what = "ConfigMap" if src.get("configMapRef") else "Secret"
                        findings.append(
                            _finding(
                                obj,
                                c.get("name"),
                                "visible-devices-env-from",
                                f"{list_name[:-1]} {c.get('name')} takes env from {what} {ref.get('name')}"
                                f"{' with prefix ' + prefix if prefix else ''}; its keys could set "
                                f"{' or '.join(n for n in watched if n.startswith(prefix))} (the lint cannot see them)",
                                f"make sure {what} {ref.get('name')} has no such key, or list the variables in env",
                            )
                        )
        if spec.get("runtimeClassName") == "nvidia" and not privileged_ns:
            findings.append(
                _finding(
                    obj,
                    None,
                    "runtime-class-nvidia",
                    f"runtimeClassName nvidia in namespace {ns}: the nvidia runtime class gives GPU access "
                    "outside the device plugin's allocation",
                    f"drop runtimeClassName (request nvidia.com/gpu instead); only "
                    f"{', '.join(sorted(allowed)) or 'no namespace'} may use it",
                )
            )
        claims = dra_claims(spec)
        if gpu_taint and (_gpu_amount(spec) > 0 or claims):
            taint = {k: gpu_taint.get(k) for k in ("key", "value", "effect")}
            if not any(tolerates(t, taint) for t in spec.get("tolerations") or []):
                value = taint.get("value")
                tol = f"{{key: {taint['key']}, operator: {'Equal, value: ' + value if value else 'Exists'}, effect: {taint['effect']}}}"
                how = (
                    "requests GPUs"
                    if _gpu_amount(spec) > 0
                    else f"gets devices through resource claim(s) {', '.join(claims)} (DRA)"
                )
                findings.append(
                    _finding(
                        obj,
                        None,
                        "gpu-taint-toleration",
                        f"{how} but does not tolerate the fleet's GPU taint "
                        f"{taint['key']}{'=' + value if value else ''}:{taint['effect']}: it would stay Pending",
                        f"add to the pod template's tolerations: {tol}",
                    )
                )
    return findings


def lint_table(findings):
    if not findings:
        return "no findings"
    rows = [
        (f["severity"], f["object"], f["container"] or "-", f["rule"], f["message"], f["fix"])
        for f in findings
    ]
    lines = [f"{s.upper():7}  {o}  [{c}]  {r}: {m} -> fix: {x}" for s, o, c, r, m, x in rows]
    errors = sum(1 for f in findings if f["severity"] == ERROR)
    lines.append(f"{len(findings)} finding(s): {errors} error(s), {len(findings) - errors} warning(s)")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# the admission guard: ValidatingAdmissionPolicy + ValidatingAdmissionPolicyBinding

GUARD_APP = "gpusplit-admission-guard"
GUARD_LABEL = "gpusplit.io/guard"
ALLOW_LABEL = "gpusplit.io/allow-visible-devices"
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
# With accept-nvidia-visible-devices-as-volume-mounts = true the NVIDIA Container Toolkit takes a
# container's GPUs from its /dev/null mounts under this directory (DeviceListAsVolumeMountsRoot,
# internal/config/image/cuda_image.go requestsFromMounts): the mount point's path, cleaned, must
# start with this string, and what follows it (slashes trimmed) is the device ("all", a UUID, an
# index). No separator is required, so .../nvidia-container-devicesall asks for every GPU too.
DEVICE_LIST_MOUNT_ROOT = "/var/run/nvidia-container-devices"
# Every path that cleans to one starting with the root has a component starting with its last
# name (cleaning drops ".", ".." and empty components, it makes no new ones): the guard refuses
# those (RE2, as CEL's matches() reads it).
DEVICE_LIST_MOUNT_PATTERN = "(^|/)" + DEVICE_LIST_MOUNT_ROOT.rsplit("/", 1)[1]

GUARD_DEFAULTS = {
    "name": "gpusplit-visible-devices",
    "forbidden_env": ["NVIDIA_VISIBLE_DEVICES"],
    "allowed_namespaces": list(DEFAULT_ALLOWED_NAMESPACES),
    "allow_label": ALLOW_LABEL,
    "match_labels": {},  # restrict the guard to namespaces carrying these labels (empty: all)
    "validation_actions": ["Deny"],
}


def guard_settings(settings=None):
    """Defaults + ``settings``; every value checked (they end up in CEL and selectors)."""
    s = with_defaults(settings or {}, GUARD_DEFAULTS, "guard settings", LintError)
    problems = []
    if not isinstance(s["name"], str) or not _DNS_SUBDOMAIN.match(s["name"]) or len(s["name"]) > 63:
        problems.append(f"name {s['name']!r} is not a DNS subdomain of at most 63 characters")
    env = s["forbidden_env"]
    if (
        not isinstance(env, (list, tuple))
        or not env
        or not all(isinstance(e, str) and _ENV_NAME.match(e) for e in env)
    ):
        problems.append(f"forbidden_env {env!r} must be a non-empty list of environment variable names")
    ns = s["allowed_namespaces"]
    if not isinstance(ns, (list, tuple)) or not all(
        isinstance(n, str) and _DNS_SUBDOMAIN.match(n) for n in ns
    ):
        problems.append(f"allowed_namespaces {ns!r} must be a list of namespace names")
    if s["allow_label"] and not (isinstance(s["allow_label"], str) and _LABEL_KEY.match(s["allow_label"])):
        problems.append(f"allow_label {s['allow_label']!r} is not a label key")
    ml = s["match_labels"]
    if not isinstance(ml, dict) or not all(
        isinstance(k, str) and _LABEL_KEY.match(k) and isinstance(v, str) and _LABEL_VALUE.match(v)
        for k, v in ml.items()
    ):
        problems.append(f"match_labels {ml!r} must map label keys to label values")
    va = s["validation_actions"]
    if (
        not isinstance(va, (list, tuple))
        or not va
        or not set(va) <= {"Deny", "Warn", "Audit"}
        or ("Deny" in va and "Warn" in va)
    ):
        problems.append(f"validation_actions {va!r}: one or more of Deny, Warn, Audit (not Deny with Warn)")
    if problems:
        raise LintError("guard settings: " + "; ".join(problems))
    s["forbidden_env"] = list(dict.fromkeys(env))
    s["allowed_namespaces"] = sorted(set(ns))
    return s


def guard_objects(settings=None):
    """[ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding] for cluster_apply.

    The policy rejects, outside the allowed namespaces, a container that sets one of
    ``forbidden_env`` and one that mounts a volume where the toolkit reads its device list
    (DEVICE_LIST_MOUNT_PATTERN): both choose GPUs past the device plugin.
    """
    s = guard_settings(settings)
    labels = {
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_NAME: GUARD_APP,
        GUARD_LABEL: s["name"],
    }
    context = {
        "name": s["name"],
        "labels": labels,
        "forbidden_env": s["forbidden_env"],
        "device_mount_root": DEVICE_LIST_MOUNT_ROOT,
        "device_mount_pattern": DEVICE_LIST_MOUNT_PATTERN,
        "allowed_namespaces": s["allowed_namespaces"],
        "allow_label": s["allow_label"] or "",
        "match_labels": s["match_labels"],
        "validation_actions": list(s["validation_actions"]),
    }
    return [
        render.render_template("validatingadmissionpolicy.yaml.j2", **context),
        render.render_template("validatingadmissionpolicybinding.yaml.j2", **context),
    ]
