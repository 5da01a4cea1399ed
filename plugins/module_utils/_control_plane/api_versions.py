# Copyright: gpusplit contributors
# Apache-2.0
"""The group/version gpusplit speaks for each versioned Kubernetes API, chosen from what the cluster serves.

Private to the collection. Pure functions over one discovery answer (kubernetes.core.k8s_cluster_info's
``apis``, ``{"group/version": {Kind: {...}}}``) and the server's version; no I/O, standard library only.

Every place that writes or reads a versioned API asks :func:`pick` for its group/version: the first
of :data:`APIS`' versions that the cluster serves with every kind the use needs, or a refusal
(:class:`ApiVersionError`) that names the group/version it needs, what the cluster serves instead,
and, from the feature-gate catalog, the gates and ``--runtime-config`` that serve it on the cluster's
release. Nothing falls back to a version the cluster does not serve.

Which release serves which group/version (k8s.io/kubernetes v1.35.4, v1.36.3, v1.37.2,
``pkg/registry/<group>/rest/storage_*.go`` and ``pkg/controlplane/instance.go``):

* DeviceTaintRule: 1.35 ``resource.k8s.io/v1alpha3`` only (alpha, off unless its runtime-config is
  on; gates DRADeviceTaints and DRADeviceTaintRules alpha, off); 1.36 ``v1beta2``
  (storage_resource.go:194; beta API off by default; DRADeviceTaints beta on, DRADeviceTaintRules beta
  off, read by kube-scheduler and kube-controller-manager); 1.37 ``v1`` (storage_resource.go:92, on).
  v1beta2 and v1 have the same DeviceTaintRuleSpec (deviceSelector driver/pool/device, taint
  key/value/effect with None/NoSchedule/NoExecute; k8s.io/api resource/v1beta2/types.go:852-945),
  so gpusplit writes either; the v1alpha3 rule of 1.35 is not written (an alpha API behind two alpha
  gates, DRADeviceTaints and DRADeviceTaintRules).
* ResourceSlice, DeviceClass, ResourceClaim, ResourceClaimTemplate: ``resource.k8s.io/v1`` in all
  three (DRA GA since 1.34).
* Workload, PodGroup (GenericWorkload): 1.35 ``scheduling.k8s.io/v1alpha1`` Workload only
  (storage_scheduling.go:87); 1.36 ``v1alpha2`` Workload and PodGroup; 1.37 ``v1beta1`` and
  ``v1alpha3`` (storage_scheduling.go:96-141; no v1alpha2), whose PodGroupSpec is the same (k8s.io/api
  v0.37.2 scheduling/v1alpha3 and v1beta1 types.go: workloadRef {workloadName, templateName},
  schedulingPolicy basic or gang {minCount}). A gang job is a PodGroup where one is served, else (1.35)
  a v1alpha1 Workload whose ``spec.podGroups`` carry the policy (k8s.io/api v0.35.4
  scheduling/v1alpha1/types.go WorkloadSpec, PodGroupPolicy), its pods naming it in
  ``spec.workloadRef {name, podGroup}`` (core/v1 types.go WorkloadReference). Gangs on 1.35 and 1.36
  also need GangScheduling on kube-scheduler (kube_features.go: GangScheduling alpha 1.35, depends on
  GenericWorkload; removed in 1.37, merged into GenericWorkload).
* ValidatingAdmissionPolicy and its binding: ``admissionregistration.k8s.io/v1`` (GA since 1.30).
* Evictions: ``policy/v1`` (the body of pods/eviction; PodDisruptionBudgets are read there too).
"""

from __future__ import annotations

from ansible_collections.gpusplit.k8s.plugins.module_utils._control_plane.gates import (
    SUPPORTED_MINORS,
    CatalogError,
    spec_at,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError
from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.versions import minor_of


class ApiVersionError(GpusplitError):
    """The cluster serves no group/version gpusplit can use for an API; nothing was changed."""


#: What gpusplit uses each versioned API for. Per entry:
#:   use       the words a refusal starts with
#:   kinds     the kinds it needs, all in one group/version
#:   versions  the group/versions gpusplit speaks, in order of preference (the first served wins)
#:   gates     {minor: gates}: the feature gates the use needs on that release (the API's, and what
#:             makes it work: GangScheduling on kube-scheduler for gangs on 1.36); their stage,
#:             default, runtime-config and components come from the gate catalog
#:   newest    what the newest covered release serves, for a refusal on an older one
APIS: dict[str, dict] = {
    "device_taint_rule": {
        "use": "a DRA host share, excluded or isolated GPU (DeviceTaintRule)",
        "kinds": ("DeviceTaintRule",),
        "versions": ("resource.k8s.io/v1", "resource.k8s.io/v1beta2"),
        "gates": {"1.36": ("DRADeviceTaintRules",)},
        "newest": (
            "Kubernetes 1.36 serves it as resource.k8s.io/v1beta2 with DRADeviceTaintRules on, 1.37 as resource.k8s.io/v1 "
            "with no gate to turn on; 1.35 has only the alpha resource.k8s.io/v1alpha3, which gpusplit does not write"
        ),
    },
    "dra": {
        "use": "DRA claims and classes",
        "kinds": ("ResourceSlice", "DeviceClass", "ResourceClaim", "ResourceClaimTemplate"),
        "versions": ("resource.k8s.io/v1",),
        "gates": {},
        "newest": "DRA is GA (resource.k8s.io/v1, on by default) from Kubernetes 1.34",
    },
    "podgroup": {
        "use": "a gang job (PodGroup)",
        "kinds": ("PodGroup",),
        "versions": ("scheduling.k8s.io/v1beta1", "scheduling.k8s.io/v1alpha3", "scheduling.k8s.io/v1alpha2"),
        "gates": {"1.36": ("GenericWorkload", "GangScheduling"), "1.37": ("GenericWorkload",)},
        "newest": (
            "Kubernetes 1.35 has no PodGroup (its scheduling.k8s.io/v1alpha1 serves Workload only); "
            "1.36 serves PodGroup as scheduling.k8s.io/v1alpha2, 1.37 as v1beta1 (GenericWorkload on)"
        ),
    },
    # a gang job in the shape of the release: a PodGroup where one is served, else (1.35) a Workload
    # with pod groups; "shapes" are (group/version, kind) in order of preference
    "gang": {
        "use": "a gang job",
        "kinds": ("PodGroup", "Workload"),
        "shapes": (
            ("scheduling.k8s.io/v1beta1", "PodGroup"),
            ("scheduling.k8s.io/v1alpha3", "PodGroup"),
            ("scheduling.k8s.io/v1alpha2", "PodGroup"),
            ("scheduling.k8s.io/v1alpha1", "Workload"),
        ),
        "versions": (
            "scheduling.k8s.io/v1beta1",
            "scheduling.k8s.io/v1alpha3",
            "scheduling.k8s.io/v1alpha2",
            "scheduling.k8s.io/v1alpha1",
        ),
        "gates": {
            "1.35": ("GenericWorkload", "GangScheduling"),
            "1.36": ("GenericWorkload", "GangScheduling"),
            "1.37": ("GenericWorkload",),
        },
        "newest": (
            "A gang job is a scheduling.k8s.io/v1alpha1 Workload with pod groups on Kubernetes 1.35, a v1alpha2 "
            "PodGroup on 1.36 and a v1beta1 PodGroup on 1.37, each with GenericWorkload on"
        ),
    },
    "workload": {
        "use": "a Workload",
        "kinds": ("Workload",),
        "versions": ("scheduling.k8s.io/v1beta1", "scheduling.k8s.io/v1alpha2", "scheduling.k8s.io/v1alpha1"),
        "gates": {"1.35": ("GenericWorkload",), "1.36": ("GenericWorkload",), "1.37": ("GenericWorkload",)},
        "newest": "GenericWorkload serves Workload on Kubernetes 1.35 (v1alpha1), 1.36 (v1alpha2) and 1.37 (v1beta1)",
    },
    "admission_policy": {
        "use": "the admission guard (ValidatingAdmissionPolicy)",
        "kinds": ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"),
        "versions": ("admissionregistration.k8s.io/v1",),
        "gates": {},
        "newest": "admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy is GA from Kubernetes 1.30",
    },
    "eviction": {
        "use": "evicting pods (the Eviction API)",
        "kinds": ("PodDisruptionBudget",),
        "versions": ("policy/v1",),
        "gates": {},
        "newest": "policy/v1 Eviction and PodDisruptionBudget are GA from Kubernetes 1.22",
    },
}


def served_kinds(apis) -> dict[str, tuple[str, ...]]:
    """The discovery answer as ``{group/version: (kinds, sorted)}``; anything malformed counts as not served."""
    out = {}
    if not isinstance(apis, dict):
        return out
    for group_version, kinds in apis.items():
        if isinstance(group_version, str) and isinstance(kinds, (dict, list, tuple)):
            out[group_version] = tuple(sorted(k for k in kinds if isinstance(k, str)))
    return out


def _entry(api: str) -> dict:
    if api not in APIS:
        raise ApiVersionError(f"unknown API use {api!r} (known: {', '.join(APIS)})")
    return APIS[api]


def _minor(server_version):
    if server_version in (None, ""):
        return None
    try:
        return minor_of(server_version, ApiVersionError)
    except ApiVersionError:
        return None


def gate_advice(gates, server_version) -> str:
    """How to turn ``gates`` on for the cluster's release, from the catalog: stage, default, runtime-config."""
    minor = _minor(server_version)
    if not gates:
        return ""
    if minor not in SUPPORTED_MINORS:
        return f"feature gate(s) {', '.join(gates)}"
    parts, runtime = [], {}
    for gate in gates:
        try:
            spec = spec_at(gate, minor)
        except CatalogError:
            spec = None
        if spec is None:
            parts.append(f"{gate} (not a gate of Kubernetes {minor})")
            continue
        where = ", ".join(spec["components"]) or "every control-plane component"
        parts.append(f"{gate} ({spec['stage']}, {'on' if spec['default'] else 'off'} by default; {where})")
        runtime.update(spec["runtime_config"])
    text = f"feature gate(s) {'; '.join(parts)}"
    if runtime:
        text += " and --runtime-config=" + ",".join(f"{k}={v}" for k, v in sorted(runtime.items()))
    names = ", ".join(f"{g}: true" for g in gates)
    return text + f" (playbooks/feature_gates.yml with gpusplit_feature_gates {{{names}}})"


def pick(api: str, apis, server_version=None) -> str:
    """The group/version to use for ``api``: the first of its versions served with every kind it needs.

    Raises :class:`ApiVersionError` (before any change) naming what is needed, what is served instead,
    and the gates and runtime-config that serve it on the cluster's release.
    """
    entry = _entry(api)
    served = served_kinds(apis)
    for group_version, kinds in _shapes(entry):
        if all(kind in served.get(group_version, ()) for kind in kinds):
            return group_version
    raise ApiVersionError(refusal(api, apis, server_version))


def _shapes(entry) -> list[tuple[str, tuple[str, ...]]]:
    """``[(group/version, kinds it needs there)]`` in order of preference."""
    if "shapes" in entry:
        return [(gv, (kind,)) for gv, kind in entry["shapes"]]
    return [(gv, entry["kinds"]) for gv in entry["versions"]]


def _needs(entry) -> str:
    if "shapes" not in entry:
        return f"{', '.join(entry['kinds'])} in {' or '.join(entry['versions'])}"
    by_kind: dict[str, list[str]] = {}
    for gv, kind in entry["shapes"]:
        by_kind.setdefault(kind, []).append(gv)
    return ", or ".join(f"{kind} in {' or '.join(gvs)}" for kind, gvs in by_kind.items())


def chosen_version(api: str, requested, apis, server_version=None) -> str:
    """``requested`` (a group/version the caller asked for, or empty) if the use speaks it and the cluster serves
    it; the one :func:`pick` finds where nothing was asked for. Raises :class:`ApiVersionError` otherwise."""
    if not requested:
        return pick(api, apis, server_version)
    entry = _entry(api)
    if requested not in entry["versions"]:
        raise ApiVersionError(
            f"{entry['use']}: gpusplit writes {' or '.join(entry['versions'])}, not {requested!r}. Nothing was changed."
        )
    kinds = dict(_shapes(entry))[requested]
    if not all(kind in served_kinds(apis).get(requested, ()) for kind in kinds):
        raise ApiVersionError(
            f"{entry['use']}: {requested} was asked for, but the API server does not serve {', '.join(kinds)} "
            f"there. {refusal(api, apis, server_version)}"
        )
    return requested


def refusal(api: str, apis, server_version=None) -> str:
    """Why ``api`` cannot be used on this cluster, and what would serve it."""
    entry = _entry(api)
    served = served_kinds(apis)
    kinds = ", ".join(entry["kinds"])
    elsewhere = sorted(
        gv
        for gv, have in served.items()
        if any(kind in have for kind in entry["kinds"]) and gv not in entry["versions"]
    )
    release = f"Kubernetes {server_version}" if server_version else "the API server"
    text = f"{entry['use']} needs {_needs(entry)}; {release} serves "
    text += (
        f"{kinds} only in {', '.join(elsewhere)}, which gpusplit does not write"
        if elsewhere
        else "none of them"
    )
    minor = _minor(server_version)
    advice = gate_advice(entry["gates"].get(minor, ()), server_version) if minor else ""
    if advice:
        text += f". On {minor} it needs {advice}"
    return f"{text}. {entry['newest']}. Nothing was changed."


def pick_all(uses, apis, server_version=None) -> dict[str, str]:
    """``{use: group/version}`` for every use; one ApiVersionError naming every refusal otherwise."""
    chosen, errors = {}, []
    for api in uses:
        try:
            chosen[api] = pick(api, apis, server_version)
        except ApiVersionError as exc:
            errors.append(str(exc))
    if errors:
        raise ApiVersionError(" | ".join(errors))
    return chosen


def gates_needed(api: str, server_version) -> list[str]:
    """The feature gates ``api`` needs on the cluster's release besides the API being served (GangScheduling on
    kube-scheduler for gangs on 1.35/1.36, DRADeviceTaintRules on kube-scheduler and kube-controller-manager for
    DeviceTaintRules on 1.36); what :func:`missing_gates` checks."""
    return list(_entry(api)["gates"].get(_minor(server_version), ()))


def choose(uses, apis, server_version=None) -> dict:
    """Every use's group/version, never raising: ``{api_versions: {use: gv or None}, refusals: {use: text},
    gates: {use: gates the release needs on, where any}, kubernetes_version}`` (a role refuses with the texts
    where it needs the use, and reads the components' gates where ``gates`` names some)."""
    chosen, refusals, gates = {}, {}, {}
    for api in uses:
        try:
            chosen[api] = pick(api, apis, server_version)
        except ApiVersionError as exc:
            chosen[api] = None
            refusals[api] = str(exc)
        if gates_needed(api, server_version):
            gates[api] = gates_needed(api, server_version)
    return {
        "api_versions": chosen,
        "refusals": refusals,
        "gates": gates,
        "kubernetes_version": server_version or None,
    }


def gates_refusal(api: str, server_version, enabled) -> str:
    """Why ``api`` cannot work although it is served: the gates :func:`missing_gates` finds off, and how to turn
    them on; empty when none is off (or ``enabled`` says nothing)."""
    missing = missing_gates(api, server_version, enabled)
    if not missing:
        return ""
    entry = _entry(api)
    return (
        f"{entry['use']}: Kubernetes {server_version} serves the API, but {', '.join(missing)} is off, so the "
        f"component does not act on it; it needs {gate_advice(gates_needed(api, server_version), server_version)}. "
        "Nothing was changed."
    )


def with_version(objects, api: str, group_version: str) -> list:
    """``objects`` (rendered in the first of the use's versions) in ``group_version``, one the use speaks.

    Only for uses whose versions share one shape (DeviceTaintRule v1 and v1beta2)."""
    entry = _entry(api)
    if group_version not in entry["versions"]:
        raise ApiVersionError(
            f"{entry['use']}: gpusplit writes {' or '.join(entry['versions'])}, not {group_version!r}"
        )
    out = []
    for obj in objects or ():
        if not isinstance(obj, dict) or obj.get("apiVersion") not in entry["versions"]:
            raise ApiVersionError(
                f"{entry['use']}: not an object of {' or '.join(entry['versions'])}: {obj!r:.120}"
            )
        out.append({**obj, "apiVersion": group_version})
    return out


def missing_gates(api: str, server_version, enabled) -> list[str]:
    """The gates ``api`` needs on this release that ``enabled`` (``{component: {gate: bool}}``, from the
    components' ``kubernetes_feature_enabled`` metrics) shows off on a component that reads them."""
    minor = _minor(server_version)
    gates = _entry(api)["gates"].get(minor, ())
    out = []
    for gate in gates:
        spec = spec_at(gate, minor) if minor in SUPPORTED_MINORS else None
        readers = spec["components"] if spec else ()
        for component, values in (enabled or {}).items():
            if readers and component not in readers:
                continue
            if isinstance(values, dict) and gate in values and not values[gate]:
                out.append(f"{gate} on {component}")
    return out
