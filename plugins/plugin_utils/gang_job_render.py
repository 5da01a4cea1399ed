# Copyright: gpusplit contributors
# Apache License 2.0 (see galaxy.yml)
"""Render a gang job: one PodGroup and the Pods that belong to it, for the cluster's Kubernetes minor.

Pure logic (no Ansible imports, no I/O besides reading templates/podgroup.yaml.j2, the one source
of truth for the shape).  Facts it rests on (k8s.io/api v0.36.1 and v0.37.2):

* 1.37: ``scheduling.k8s.io/v1beta1`` PodGroup (beta API, served only with
  ``--runtime-config=scheduling.k8s.io/v1beta1=true`` and the ``GenericWorkload`` gate);
  ``spec.schedulingPolicy`` is exactly one of ``basic: {}`` and ``gang: {minCount: >=1}``
  (scheduling/v1beta1/types.go ``PodGroupSchedulingPolicy``, ``GangSchedulingPolicy``); the optional
  link to a Workload's template is ``spec.workloadRef {workloadName, templateName}``.
* 1.36: ``scheduling.k8s.io/v1alpha2`` PodGroup with the same ``schedulingPolicy``; the link is
  ``spec.podGroupTemplateRef.workload {workloadName, podGroupTemplateName}``
  (scheduling/v1alpha2/types.go ``PodGroupTemplateReference``).
* 1.37 also serves ``scheduling.k8s.io/v1alpha3`` PodGroup (with its runtime-config), whose spec is the
  v1beta1 one (scheduling/v1alpha3/types.go): rendered alike.
* 1.35 has no PodGroup: ``scheduling.k8s.io/v1alpha1`` serves Workload only (k8s.io/api v0.35.4
  scheduling/v1alpha1/types.go): a gang job there is a Workload whose ``spec.podGroups`` hold one group
  ``{name, policy: {gang: {minCount}} | {basic: {}}}`` (a DNS label), and each member Pod names it in
  ``spec.workloadRef {name, podGroup}`` (core/v1 ``WorkloadReference``).
* From 1.36 a member Pod names its group with ``spec.schedulingGroup.podGroupName`` (core/v1
  ``PodSchedulingGroup``; kube-apiserver drops the field while GenericWorkload is off).

The group/version comes from the cluster where the caller passes kubernetes.core.k8s_cluster_info's answer
(the first of ``APIS["gang"]``'s shapes it serves, or a refusal naming the gates and runtime-config of the
release), else from the release or group/version the caller names.

* A served API is not enough: on 1.35 and 1.36 kube-scheduler holds a gang only with ``GangScheduling`` on
  (k8s.io/kubernetes v1.36.3 pkg/scheduler/apis/config/v1/default_plugins.go:67 adds the GangScheduling
  plugin under that gate; v1.37.2 default_plugins.go:72 under GenericWorkload, the gate being gone). Given
  the gates the components run with (gpusplit.k8s.control_plane_health's ``feature_gates``), a gate the
  release needs that kube-scheduler runs without, or does not report, is refused naming it.
* ``nvidia.com/gpu`` and every other extended resource: requests must equal limits and be integers.
"""

from __future__ import annotations

import re

from ansible_collections.gpusplit.k8s.plugins.module_utils._control_plane import api_versions
from ansible_collections.gpusplit.k8s.plugins.module_utils._control_plane.components import SCHEDULER
from ansible_collections.gpusplit.k8s.plugins.module_utils._control_plane.gates import (
    SUPPORTED_MINORS,
    spec_at,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import (
    GpusplitError,
    a_type_name,
    type_name,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.names import (
    LABEL_MANAGED_BY,
    MANAGED_BY,
    label_value,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.versions import minor_of
from ansible_collections.gpusplit.k8s.plugins.plugin_utils import split_render as render

PODGROUP_API_VERSIONS = {
    "1.36": "scheduling.k8s.io/v1alpha2",
    "1.37": "scheduling.k8s.io/v1beta1",
}
# the gang job's group/version per release, where the caller names a release rather than the cluster
GANG_API_VERSIONS = {"1.35": "scheduling.k8s.io/v1alpha1", **PODGROUP_API_VERSIONS}
# the kind that carries the gang's policy, per group/version (api_versions.APIS["gang"])
GANG_KINDS = dict(api_versions.APIS["gang"]["shapes"])
# the one pod group of a 1.35 Workload (a DNS label)
WORKLOAD_POD_GROUP = "workers"
TEMPLATE = "podgroup.yaml.j2"
POLICIES = ("gang", "basic")
LABEL_PODGROUP = "gpusplit.io/podgroup"
DEFAULT_IMAGE = "registry.k8s.io/pause:3.10"

DEFAULTS = {
    "namespace": "default",
    "policy": "gang",
    "replicas": 1,
    "min_count": None,  # gang: default all replicas
    "gpus_per_pod": 1,
    "gpu_resource": "nvidia.com/gpu",
    "image": DEFAULT_IMAGE,
    "command": None,
    "container_name": "worker",
    "node_selector": {},
    "tolerations": [],
    "labels": {},
    "priority_class_name": None,
    "restart_policy": "Never",
    "termination_grace_period_seconds": 30,
    "workload": None,  # {name, template}: the Workload PodGroup template this group was made from
}

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


class WorkloadError(GpusplitError):
    """The gang job cannot be rendered; ``errors`` lists every reason."""


def podgroup_api_version(version) -> str:
    """The PodGroup apiVersion a cluster of ``version`` serves (with GenericWorkload on)."""
    minor = minor_of(version, WorkloadError)
    if minor in PODGROUP_API_VERSIONS:
        return PODGROUP_API_VERSIONS[minor]
    if minor == "1.35":
        raise WorkloadError(
            [
                "Kubernetes 1.35 has no PodGroup API: scheduling.k8s.io/v1alpha1 serves Workload only "
                "(pods point at it with spec.workloadRef); gang jobs need 1.36 (v1alpha2) or 1.37 (v1beta1)"
            ]
        )
    raise WorkloadError(
        [f"Kubernetes {minor} is not supported for PodGroups (supported: {', '.join(PODGROUP_API_VERSIONS)})"]
    )


def gang_api_version(version) -> str:
    """The group/version a gang job is written in: from ``version``, kubernetes.core.k8s_cluster_info's answer
    (what the cluster serves), a group/version (``scheduling.k8s.io/v1alpha1``) or a release (``1.35``)."""
    if isinstance(version, dict):
        try:
            return api_versions.pick("gang", version.get("apis"), _release(version))
        except api_versions.ApiVersionError as exc:
            raise WorkloadError([str(exc)]) from None
    if isinstance(version, str) and "/" in version:
        if version not in GANG_KINDS:
            raise WorkloadError([f"a gang job is written in {', '.join(GANG_KINDS)}, not {version!r}"])
        return version
    minor = minor_of(version, WorkloadError)
    if minor not in GANG_API_VERSIONS:
        raise WorkloadError(
            [
                f"Kubernetes {minor} is not supported for gang jobs (supported: {', '.join(sorted(GANG_API_VERSIONS))})"
            ]
        )
    return GANG_API_VERSIONS[minor]


def _release(version):
    """The Kubernetes release ``version`` names (the cluster's answer or a release); None for a group/version."""
    if isinstance(version, dict):
        server = (version.get("version") or {}).get("server") or {}
        return (server.get("kubernetes") or {}).get("gitVersion") if isinstance(server, dict) else None
    if isinstance(version, str) and "/" in version:
        return None
    return version


def component_gates(gates) -> dict[str, dict[str, bool]]:
    """``{component: {gate: bool}}`` from control_plane_health's result (its ``feature_gates``) or that mapping;
    a gate a component did not report (null) is left out. Raises :class:`WorkloadError` on any other shape."""
    if isinstance(gates, dict) and isinstance(gates.get("feature_gates"), dict):
        gates = gates["feature_gates"]
    want = "gpusplit.k8s.control_plane_health's result or {component: {gate: true or false}}"
    if not isinstance(gates, dict):
        raise WorkloadError([f"gates: expected {want}, got {type_name(gates)}"])
    out, errors = {}, []
    for component, values in gates.items():
        if not isinstance(values, dict):
            errors.append(f"gates.{component}: expected {{gate: true or false}}, got {type_name(values)}")
            continue
        out[str(component)] = {}
        for gate, value in values.items():
            if value is None:
                continue
            if not isinstance(value, (bool, int, float)):
                errors.append(
                    f"gates.{component}.{gate}: expected true, false, 0 or 1, got {type_name(value)}"
                )
                continue
            out[str(component)][str(gate)] = bool(value)
    if errors:
        raise WorkloadError(errors)
    return out


def gate_errors(version, gates) -> list[str]:
    """Why the release's kube-scheduler would not hold the gang: the gates it needs there (GenericWorkload, and
    GangScheduling on 1.35 and 1.36) that ``gates`` shows off on a component that reads them, or that
    kube-scheduler does not report. Empty where ``gates`` is None (nothing to check against)."""
    if gates is None:
        return []
    enabled = component_gates(gates)
    release = _release(version)
    if release is None:
        return [
            "gates: checking them needs the cluster's release; pass kubernetes.core.k8s_cluster_info's answer "
            "or a release (1.36), not a group/version"
        ]
    minor = minor_of(release, WorkloadError)
    off = api_versions.gates_refusal("gang", release, enabled)
    if off:
        return [off]
    needed = api_versions.gates_needed("gang", release)
    reported = enabled.get(SCHEDULER, {})
    unknown = [
        g
        for g in needed
        if minor in SUPPORTED_MINORS and SCHEDULER in spec_at(g, minor)["components"] and g not in reported
    ]
    if not unknown:
        return []
    asked = ", ".join(f"{g}: true" for g in needed)
    return [
        f"a gang job: the gates given do not say whether kube-scheduler runs with {', '.join(unknown)}, which "
        f"Kubernetes {release} needs for gangs; read them on a control-plane node with "
        f"gpusplit.k8s.control_plane_health (components [kube-scheduler], feature_gates {{{asked}}}). "
        "Nothing was changed."
    ]


def _int(value, what, errors, minimum):
    if isinstance(value, bool):
        errors.append(f"{what} must be an integer, got {value!r}")
        return None
    try:
        number = int(str(value).strip())
    except (TypeError, ValueError):
        errors.append(f"{what} must be an integer, got {value!r}")
        return None
    if str(value).strip() != str(number):
        errors.append(f"{what} must be an integer, got {value!r}")
        return None
    if number < minimum:
        errors.append(f"{what} must be >= {minimum}, got {number}")
        return None
    return number


def resolve_job(spec: dict) -> dict:
    """``spec`` with defaults applied and checked; raises :class:`WorkloadError` listing every problem."""
    if spec is not None and not isinstance(spec, dict):
        raise WorkloadError(
            [f"the gang job: expected a mapping (name, replicas, gpus_per_pod, ...), got {type_name(spec)}"]
        )
    errors: list[str] = []
    unknown = sorted(set(spec or {}) - set(DEFAULTS) - {"name"})
    if unknown:
        errors.append(f"unknown gang job keys: {', '.join(unknown)} (known: name, {', '.join(DEFAULTS)})")
    job = {**DEFAULTS, **{k: v for k, v in (spec or {}).items() if v is not None or k == "min_count"}}
    name = str(job.get("name") or "")
    if not name:
        errors.append("name is required")
    elif not _DNS_SUBDOMAIN.match(name) or len(name) > 240:
        errors.append(
            f"name {name!r} must be a DNS subdomain of at most 240 characters (pods are <name>-<index>)"
        )
    if not _DNS_SUBDOMAIN.match(str(job["namespace"])) or "." in str(job["namespace"]):
        errors.append(f"namespace {job['namespace']!r} is not a DNS label")
    if job["policy"] not in POLICIES:
        errors.append(f"policy must be one of {', '.join(POLICIES)}, got {job['policy']!r}")
    replicas = _int(job["replicas"], "replicas", errors, 1)
    gpus = _int(job["gpus_per_pod"], "gpus_per_pod (requests = limits, whole GPUs)", errors, 0)
    min_count = None
    if job["policy"] == "gang":
        min_count = replicas if job["min_count"] is None else _int(job["min_count"], "min_count", errors, 1)
        if replicas is not None and min_count is not None and min_count > replicas:
            errors.append(
                f"min_count {min_count} > replicas {replicas}: the gang could never reach its quorum"
            )
    elif job["min_count"] is not None:
        errors.append("min_count applies to policy gang only (basic schedules each pod on its own)")
    workload = job["workload"]
    if workload is not None and (
        not isinstance(workload, dict) or not workload.get("name") or not workload.get("template")
    ):
        errors.append("workload must be {name, template}: the Workload and its PodGroup template")
    for key, kind, words in (
        ("node_selector", dict, "a mapping"),
        ("labels", dict, "a mapping"),
        ("tolerations", list, "a list"),
    ):
        if not isinstance(job[key], kind):
            errors.append(f"{key} must be {words}, not {a_type_name(job[key])}")
    if job["command"] is not None and not isinstance(job["command"], list):
        errors.append("command must be a list")
    if errors:
        raise WorkloadError(errors)
    job.update(name=name, replicas=replicas, gpus_per_pod=gpus, min_count=min_count)
    return job


def _labels(job: dict) -> dict:
    labels = {str(k): str(v) for k, v in job["labels"].items()}
    labels.setdefault(LABEL_MANAGED_BY, MANAGED_BY)
    labels[LABEL_PODGROUP] = label_value(job["name"])
    return labels


def _context(job: dict, api_version: str) -> dict:
    return {
        "api_version": api_version,
        "name": job["name"],
        "namespace": job["namespace"],
        "labels": _labels(job),
        "policy": job["policy"],
        "min_count": job["min_count"],
        "workload": job["workload"],
        "priority_class_name": job["priority_class_name"],
        "restart_policy": job["restart_policy"],
        "termination_grace_period_seconds": job["termination_grace_period_seconds"],
        "node_selector": {str(k): str(v) for k, v in job["node_selector"].items()},
        "tolerations": job["tolerations"],
        "container_name": job["container_name"],
        "image": job["image"],
        "command": job["command"],
        "gpu_resource": job["gpu_resource"],
        "gpus_per_pod": job["gpus_per_pod"],
    }


def _gang(spec, version, gates=None) -> tuple[dict, str, str]:
    """The job, its group/version and the kind that carries the policy (PodGroup, or a 1.35 Workload); every
    refusal of the gates and the spec at once."""
    api_version = gang_api_version(version)
    try:
        errors = gate_errors(version, gates)
    except WorkloadError as exc:
        errors = exc.errors
    try:
        job = resolve_job(spec)
    except WorkloadError as exc:
        raise WorkloadError(errors + exc.errors) from None
    if errors:
        raise WorkloadError(errors)
    kind = GANG_KINDS[api_version]
    if kind == "Workload" and job["workload"] is not None:
        raise WorkloadError(
            [
                f"workload links a PodGroup to its Workload; in {api_version} the gang job is itself a Workload "
                "(no PodGroup object): leave workload out"
            ]
        )
    return job, api_version, kind


def _render(kind, job, api_version, **extra) -> dict:
    return render.render_template(
        TEMPLATE, kind=kind, pod_group=WORKLOAD_POD_GROUP, **extra, **_context(job, api_version)
    )


def render_podgroup(spec: dict, version="1.37", gates=None) -> dict:
    """The object that carries a gang job's policy for a cluster of ``version``: its PodGroup, or (1.35) its
    Workload; ``gates`` as in :func:`gate_errors`."""
    job, api_version, kind = _gang(spec, version, gates)
    return _render(kind, job, api_version)


def member_name(name: str, index: int) -> str:
    return f"{name}-{index}"


def render_member_pod(spec: dict, index: int, version="1.37", gates=None) -> dict:
    """Member ``index`` (0-based) of a gang job: a Pod naming its PodGroup in spec.schedulingGroup, or (1.35)
    its Workload's pod group in spec.workloadRef."""
    job, api_version, kind = _gang(spec, version, gates)
    return _render(
        "Pod", job, api_version, group_kind=kind, pod_name=member_name(job["name"], index), index=index
    )


def render_gang_job(spec: dict, version="1.37", gates=None) -> list[dict]:
    """``[PodGroup (or Workload), Pod 0, ..., Pod replicas-1]`` in creation order (the group first); ``gates``
    (the components' gates, :func:`gate_errors`) refuses a gang the release's kube-scheduler would not hold."""
    job, api_version, kind = _gang(spec, version, gates)
    objects = [_render(kind, job, api_version)]
    for index in range(job["replicas"]):
        objects.append(
            _render(
                "Pod",
                job,
                api_version,
                group_kind=kind,
                pod_name=member_name(job["name"], index),
                index=index,
            )
        )
    return objects
