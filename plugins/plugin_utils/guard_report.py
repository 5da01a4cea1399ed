# Copyright: gpusplit contributors
# Apache-2.0
"""The guard report: namespaces where Pod Security admission lets a privileged pod run, and what
in them can land on a split node.

The container toolkit treats a privileged container (and, with the default settings, one with
CAP_SYS_ADMIN) as allowed to see every GPU that NVIDIA_VISIBLE_DEVICES names, the host's share
included, whatever the toolkit hardening (docs/hardening.md). Pod Security admission's
``baseline`` and ``restricted`` levels forbid both; ``privileged`` allows them. A namespace's
level is its ``pod-security.kubernetes.io/enforce`` label, else the apiserver's default
(AdmissionConfiguration, PodSecurity plugin, ``defaults.enforce``; ``privileged`` when the
apiserver has no such configuration), and namespaces in its ``exemptions.namespaces`` are not
checked at all. The default is not readable through the API: the report takes it from the
caller (a level, or the AdmissionConfiguration's text) and says "unknown" otherwise.

A workload can land on a split node when, for at least one node labelled gpusplit.io/split=true,
its pod template's nodeName, nodeSelector and required node affinity match the node and it
tolerates every NoSchedule/NoExecute taint of the node (``_k8s/scheduling.py``, the scheduler's
rules).

Pure functions over API objects as dicts.
"""

from __future__ import annotations

import yaml

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError, type_name
from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.scheduling import (
    matches_node,
    node_taints,
    untolerated_taints,
)
from ansible_collections.gpusplit.k8s.plugins.plugin_utils import split_render as render
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.workload_checks import pod_spec

ENFORCE_LABEL = "pod-security.kubernetes.io/enforce"
LEVELS = ("privileged", "baseline", "restricted")
PERMISSIVE = "privileged"
BUILTIN_DEFAULT = "privileged"  # Pod Security admission without an AdmissionConfiguration
UNKNOWN_DEFAULT = "unknown: default from AdmissionConfiguration not readable"
WORKLOAD_KINDS = ("Pod", "Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "CronJob")
_CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")


class GuardReportError(GpusplitError):
    """Bad input for the guard report."""


def pod_security_defaults(admission_config):
    """(default enforce level, exempt namespaces) from an AdmissionConfiguration's text or dict.

    The level is None when the file has no PodSecurity plugin or its configuration lives in a
    separate file (``path``): then the caller does not know it. An apiserver started without
    any AdmissionConfiguration enforces ``privileged`` (BUILTIN_DEFAULT), which only the caller
    can know.
    """
    doc = admission_config
    if isinstance(doc, str):
        try:
            doc = yaml.safe_load(doc)
        except yaml.YAMLError as exc:
            raise GuardReportError(f"AdmissionConfiguration: not YAML ({exc})") from None
    if not isinstance(doc, dict) or doc.get("kind") != "AdmissionConfiguration":
        raise GuardReportError("AdmissionConfiguration: expected a document of kind AdmissionConfiguration")
    for plugin in doc.get("plugins") or []:
        if isinstance(plugin, dict) and plugin.get("name") == "PodSecurity":
            conf = plugin.get("configuration")
            if not isinstance(conf, dict):
                return None, []
            level = (conf.get("defaults") or {}).get("enforce") or BUILTIN_DEFAULT
            if level not in LEVELS:
                raise GuardReportError(
                    f"AdmissionConfiguration: PodSecurity defaults.enforce {level!r} is not one of {', '.join(LEVELS)}"
                )
            return level, list((conf.get("exemptions") or {}).get("namespaces") or [])
    return BUILTIN_DEFAULT, []


def namespace_level(namespace, default_level=None, exempt=()):
    """(level, source) of one Namespace: what Pod Security admission enforces there."""
    meta = namespace.get("metadata") or {}
    name = meta.get("name")
    if name in exempt:
        return PERMISSIVE, "exempt in the AdmissionConfiguration"
    label = (meta.get("labels") or {}).get(ENFORCE_LABEL)
    if label is not None:
        if label in LEVELS:
            return label, f"label {ENFORCE_LABEL}={label}"
        return "unknown", f"label {ENFORCE_LABEL}={label!r} is not a Pod Security level"
    if default_level in LEVELS:
        return default_level, "the apiserver's default"
    return "unknown", UNKNOWN_DEFAULT


def privileged_containers(spec):
    """The containers of a pod spec that are privileged or add SYS_ADMIN (or ALL)."""
    out = []
    for list_name in _CONTAINER_LISTS:
        for c in spec.get(list_name) or []:
            sc = (c or {}).get("securityContext") or {}
            added = {str(a).upper() for a in ((sc.get("capabilities") or {}).get("add") or [])}
            if sc.get("privileged") is True or added & {"SYS_ADMIN", "CAP_SYS_ADMIN", "ALL"}:
                out.append(f"{list_name[:-1]} {c.get('name')}")
    return out


def _owned(obj):
    """Owned by another workload of the report (its owner is listed instead)."""
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return any(isinstance(r, dict) and r.get("kind") in WORKLOAD_KINDS for r in refs)


def landing_nodes(spec, split_nodes):
    """The split nodes a pod with this spec can be placed on (selection and taints)."""
    pod = {"spec": spec}
    return [
        n["metadata"]["name"]
        for n in split_nodes
        if matches_node(pod, n) and not untolerated_taints(spec.get("tolerations"), node_taints(n))
    ]


def privileged_report(
    namespaces, workloads, nodes, default_level=None, admission_config=None, allowed_namespaces=()
):
    """What Pod Security lets run privileged, and what of it can land on a split node.

    ``namespaces``, ``workloads`` (Pods and pod-template kinds; one owned by another of them is
    left out, its owner is listed), ``nodes`` (split nodes are those labelled
    gpusplit.io/split=true): API objects. ``default_level``: the apiserver's default enforce
    level when the caller knows it; ``admission_config``: the apiserver's AdmissionConfiguration
    (text or dict) when readable, which wins. ``allowed_namespaces``: the guard's (marked).
    """
    if default_level is not None and default_level not in LEVELS:
        raise GuardReportError(f"default_level {default_level!r} is not one of {', '.join(LEVELS)} (or null)")
    exempt = []
    default_source = "given" if default_level else None
    if admission_config:
        default_level, exempt = pod_security_defaults(admission_config)
        default_source = "AdmissionConfiguration" if default_level else None
    split_nodes = [
        n
        for n in nodes or []
        if ((n.get("metadata") or {}).get("labels") or {}).get(render.LABEL_SPLIT) == "true"
    ]
    rows = []
    for ns in sorted(namespaces or [], key=lambda n: (n.get("metadata") or {}).get("name") or ""):
        level, source = namespace_level(ns, default_level, exempt)
        if level in (PERMISSIVE, "unknown"):
            name = ns["metadata"]["name"]
            rows.append(
                {"name": name, "level": level, "source": source, "allowed": name in allowed_namespaces}
            )
    listed = {r["name"] for r in rows}
    found = []
    for obj in workloads or []:
        meta = obj.get("metadata") or {}
        spec = pod_spec(obj)
        if meta.get("namespace") not in listed or spec is None or _owned(obj):
            continue
        landing = landing_nodes(spec, split_nodes)
        if landing:
            found.append(
                {
                    "namespace": meta["namespace"],
                    "kind": obj.get("kind"),
                    "name": meta.get("name"),
                    "split_nodes": landing,
                    "privileged": privileged_containers(spec),
                }
            )
    found.sort(key=lambda w: (w["namespace"], w["kind"], w["name"] or ""))
    return {
        "default_level": default_level or UNKNOWN_DEFAULT,
        "default_source": default_source or "unknown",
        "split_nodes": sorted(n["metadata"]["name"] for n in split_nodes),
        "namespaces": rows,
        "workloads": found,
    }


REPORT_FIELDS = {
    "default_level": str,
    "default_source": str,
    "split_nodes": list,
    "namespaces": list,
    "workloads": list,
}


def _check_report(report):
    """Refuse anything but a report of privileged_report's shape, naming what is wrong."""
    if not isinstance(report, dict):
        raise GuardReportError(
            f"the guard report must be a mapping (what guard_privileged_report returns), got {type_name(report)}"
        )
    problems = []
    for field, kind in REPORT_FIELDS.items():
        if field not in report:
            problems.append(f"the guard report has no '{field}'")
        elif not isinstance(report[field], kind):
            problems.append(
                f"the guard report's '{field}' must be a {type_name(kind())}, got {type_name(report[field])}"
            )
    for key in ("namespaces", "workloads"):
        for i, item in enumerate(report.get(key) if isinstance(report.get(key), list) else []):
            if not isinstance(item, dict):
                problems.append(f"the guard report's {key}[{i}] must be a mapping, got {type_name(item)}")
    if problems:
        raise GuardReportError(problems)


def report_table(report):
    """The report as lines for a person."""
    _check_report(report)
    lines = [f"Pod Security default (enforce): {report['default_level']} ({report['default_source']})"]
    lines.append(
        f"split nodes: {', '.join(report['split_nodes']) or 'none (no node labelled gpusplit.io/split=true)'}"
    )
    if not report["namespaces"]:
        lines.append("no namespace lets privileged or CAP_SYS_ADMIN pods run")
    for ns in report["namespaces"]:
        guarded = "allowed by the guard" if ns["allowed"] else "guarded"
        lines.append(f"namespace {ns['name']}: {ns['level']} ({ns['source']}; {guarded})")
        for w in report["workloads"]:
            if w["namespace"] == ns["name"]:
                priv = f"; privileged now: {', '.join(w['privileged'])}" if w["privileged"] else ""
                lines.append(f"  {w['kind']}/{w['name']} can land on {', '.join(w['split_nodes'])}{priv}")
    return "\n".join(lines)
