# Copyright: gpusplit contributors
# Apache License 2.0 (see galaxy.yml)
"""Version-aware catalog of the Kubernetes feature gates gpusplit touches, and their validation.

Pure logic: no Ansible imports, no I/O.  Modules and roles call :func:`validate_gates` before they
write a gate into a control-plane manifest, and :func:`upgrade_preflight` before an upgrade, because
a wrong gate does not fail softly: each Kubernetes component parses ``--feature-gates`` at start and
exits on the first problem (k8s.io/component-base v0.37.2 featuregate/feature_gate.go):

* line 421  ``unrecognized feature gate: X``                      (gate unknown to that release)
* line 426  ``cannot set feature gate X to Y, feature is locked to Z``
* line 466  ``X is enabled, but depends on features that are disabled: [A B]``

and kube-apiserver exits when ``--runtime-config`` names a group/version the release does not know
(k8s.io/apiserver v0.37.2 pkg/server/resourceconfig/helpers.go:157
``group version G/V that has not been registered``).

Sources of the catalog
----------------------
Every entry below was read from the released Go modules ``k8s.io/kubernetes`` v1.35.4, v1.36.3 and
v1.37.2 (``go mod download``), file ``pkg/features/kube_features.go``: the versioned spec map
(``{Version, Default, PreRelease, LockToDefault}``) and ``defaultKubernetesFeatureGateDependencies``.
Each entry carries ``src``: ``{release: (spec line, dependency line)}`` in that file.  A component
evaluates a gate at its own version (no emulation version here): the spec that applies is the last
history entry whose version is <= the component's minor, exactly like
``featureSpecAtEmulationAndMinCompatVersion``.

API group/versions (``runtime_config``) come from the same releases:
``pkg/registry/{scheduling,resource}/rest/storage_*.go`` (which versions serve which resources, and
behind which gate), ``pkg/controlplane/instance.go`` (alpha and beta group/versions are disabled by
default) and ``pkg/apis/{scheduling,resource}/install/install.go`` (which versions are registered, i.e.
accepted by ``--runtime-config`` at all).

Where the stored sources say nothing (the "merged into GenericWorkload" wording for GangScheduling
and WorkloadAwarePreemption), the catalog follows DESIGN.md section 3 and the user's seed 000; the
v1.37.2 tree supports it: test/e2e/scheduling/gang_scheduling.go:35 and
test/e2e/scheduling/workload_aware_preemption.go:61 now run under ``features.GenericWorkload``.
"""

from __future__ import annotations

import re

ALPHA = "alpha"
BETA = "beta"
GA = "ga"
DEPRECATED = "deprecated"

#: The Kubernetes minors this catalog describes. Anything else is refused, loudly.
SUPPORTED_MINORS = ("1.35", "1.36", "1.37")

APISERVER = "kube-apiserver"
SCHEDULER = "kube-scheduler"
CONTROLLER_MANAGER = "kube-controller-manager"
KUBELET = "kubelet"
CONTROL_PLANE = (APISERVER, SCHEDULER, CONTROLLER_MANAGER)

#: component-base registers these two "special" gates in every release: setting one flips every
#: alpha (beta) gate that is not set explicitly (featuregate/feature_gate.go, allAlphaGate/allBetaGate).
SPECIAL_GATES = {"AllAlpha": ALPHA, "AllBeta": BETA}

_K = "pkg/features/kube_features.go"

# Each gate:
#   history      [(since_minor, default, stage, locked)], as in the Go versioned spec list
#   removed_in   first minor whose components no longer know the gate (None: still present in 1.37)
#   merged_into  the gate that took over the removed gate's function (removal note)
#   depends_on   gates that must be enabled whenever this gate is enabled
#   components   control-plane components (and kubelet) whose code reads the gate in v1.37.2
#                (grep of features.<Gate> under pkg/registry, pkg/api, plugin/pkg/admission,
#                pkg/scheduler, pkg/controller, cmd/kube-controller-manager, pkg/kubelet).
#                Every component that imports pkg/features knows every gate, so a stale name
#                stops all of them; set the same list on all control-plane components.
#   runtime_config  {minor: {"group/version": "true"}}: API versions the gate's own resources are
#                served at, where those are off by default (alpha/beta group/versions).
#   api          {minor: "group/version resources"}: what the gate serves, for humans
#   planned      the Go source's own comment on the next step ("remove in 1.40", ...)
#   src          {release: (spec line, dependency line)} in pkg/features/kube_features.go
CATALOG: dict[str, dict] = {
    # ---- workload-aware scheduling (gang scheduling) ------------------------------------------
    "GenericWorkload": {
        "history": [("1.35", False, ALPHA, False), ("1.37", False, BETA, False)],
        "depends_on": (),
        "components": CONTROL_PLANE,
        # 1.35: pkg/registry/scheduling/rest/storage_scheduling.go:87-88 v1alpha1 workloads
        # 1.36: storage_scheduling.go:88-101 v1alpha2 workloads, podgroups
        # 1.37: storage_scheduling.go:96-115 v1beta1 workloads, podgroups; beta off by default:
        #       pkg/controlplane/instance.go:506 (betaAPIGroupVersionsDisabledByDefault)
        # kube-controller-manager (podgroup protection, cmd/kube-controller-manager/app/scheduling.go:37)
        # and kube-scheduler (pkg/scheduler/eventhandlers.go:662) watch podgroups at that version.
        "runtime_config": {
            "1.35": {"scheduling.k8s.io/v1alpha1": "true"},
            "1.36": {"scheduling.k8s.io/v1alpha2": "true"},
            "1.37": {"scheduling.k8s.io/v1beta1": "true"},
        },
        "api": {
            "1.35": "scheduling.k8s.io/v1alpha1 Workload",
            "1.36": "scheduling.k8s.io/v1alpha2 Workload, PodGroup",
            "1.37": "scheduling.k8s.io/v1beta1 Workload, PodGroup",
        },
        "src": {"1.35.4": (1321, 2251), "1.36.3": (1478, 2485), "1.37.2": (1622, 2651)},
    },
    "GangScheduling": {
        "history": [("1.35", False, ALPHA, False)],
        "removed_in": "1.37",
        "merged_into": "GenericWorkload",
        "depends_on": ("GenericWorkload",),
        "components": (SCHEDULER,),
        "src": {"1.35.4": (1317, 2249), "1.36.3": (1474, 2483)},
    },
    "WorkloadAwarePreemption": {
        "history": [("1.36", False, ALPHA, False)],
        "removed_in": "1.37",
        "merged_into": "GenericWorkload",
        "depends_on": ("GangScheduling",),
        "components": (APISERVER, SCHEDULER),
        "src": {"1.36.3": (2137, 2743)},
    },
    "TopologyAwareWorkloadScheduling": {
        "history": [("1.36", False, ALPHA, False)],
        "depends_on": ("GenericWorkload",),
        "components": (APISERVER, SCHEDULER),
        # PodGroup fields (k8s.io/api v0.37.2 scheduling/v1beta1/types.go:229): the API is
        # GenericWorkload's, no group/version of its own.
        "src": {"1.36.3": (2065, 2715), "1.37.2": (2231, 2892)},
    },
    "WorkloadWithJob": {
        "history": [("1.36", False, ALPHA, False)],
        "depends_on": ("GenericWorkload",),
        "components": (APISERVER, CONTROLLER_MANAGER),
        "src": {"1.36.3": (2141, 2745), "1.37.2": (2308, 2922)},
    },
    "PodGroupPreemptionPolicy": {
        "history": [("1.37", False, ALPHA, False)],
        "depends_on": ("GenericWorkload",),
        "components": (APISERVER, SCHEDULER),
        "src": {"1.37.2": (1956, 2781)},
    },
    "CompositePodGroup": {
        "history": [("1.37", False, ALPHA, False)],
        "depends_on": ("GenericWorkload", "TopologyAwareWorkloadScheduling"),
        "components": (APISERVER, SCHEDULER),
        # 1.37: storage_scheduling.go:152-158 v1alpha3 compositepodgroups (alpha, off by default:
        # instance.go:522); the scheduler watches it at v1alpha3 (eventhandlers.go:673).
        "runtime_config": {"1.37": {"scheduling.k8s.io/v1alpha3": "true"}},
        "api": {"1.37": "scheduling.k8s.io/v1alpha3 CompositePodGroup"},
        "src": {"1.37.2": (1429, 2571)},
    },
    "DRAWorkloadResourceClaims": {
        "history": [("1.36", False, ALPHA, False), ("1.37", False, BETA, False)],
        "depends_on": ("DynamicResourceAllocation", "GenericWorkload"),
        "components": (APISERVER, SCHEDULER, CONTROLLER_MANAGER, KUBELET),
        "src": {"1.36.3": (1415, 2461), "1.37.2": (1545, 2621)},
    },
    # ---- Dynamic Resource Allocation ----------------------------------------------------------
    "DynamicResourceAllocation": {
        "history": [
            ("1.26", False, ALPHA, False),
            ("1.32", False, BETA, False),
            ("1.34", True, GA, False),
            ("1.35", True, GA, True),
        ],
        "depends_on": (),
        "components": (APISERVER, SCHEDULER, CONTROLLER_MANAGER, KUBELET),
        "planned": "remove completely in 1.38 (kubernetes/kubernetes#134459)",
        "api": {m: "resource.k8s.io/v1 (on by default)" for m in SUPPORTED_MINORS},
        "src": {"1.35.4": (1292, 2239), "1.36.3": (1443, 2471), "1.37.2": (1579, 2633)},
    },
    "DRADeviceTaints": {
        "history": [
            ("1.33", False, ALPHA, False),
            ("1.36", True, BETA, False),
            ("1.37", True, GA, False),
        ],
        "depends_on": ("DynamicResourceAllocation",),
        "components": (APISERVER, SCHEDULER, CONTROLLER_MANAGER),
        "planned": "LockToDefault: true in 1.38; remove in 1.41",
        "src": {"1.35.4": (1244, 2219), "1.36.3": (1369, 2441), "1.37.2": (1481, 2595)},
    },
    "DRADeviceTaintRules": {
        "history": [
            ("1.35", False, ALPHA, False),
            ("1.36", False, BETA, False),
            ("1.37", True, GA, False),
        ],
        "depends_on": ("DRADeviceTaints",),
        "components": (SCHEDULER, CONTROLLER_MANAGER),
        # 1.35: storage_resource.go:120 devicetaintrules only at v1alpha3 (alpha, off by default,
        #       instance.go:493)
        # 1.36: storage_resource.go:194 v1beta2 devicetaintrules (beta, off by default,
        #       instance.go:492); kube-controller-manager watches v1beta2 (app/resource.go:56).
        #       The spec line itself says "Depends on an off-by-default beta API".
        # 1.37: storage_resource.go:92 v1 devicetaintrules, on by default; nothing to enable.
        "runtime_config": {
            "1.35": {"resource.k8s.io/v1alpha3": "true"},
            "1.36": {"resource.k8s.io/v1beta2": "true"},
        },
        "api": {
            "1.35": "resource.k8s.io/v1alpha3 DeviceTaintRule",
            "1.36": "resource.k8s.io/v1beta2 DeviceTaintRule",
            "1.37": "resource.k8s.io/v1 DeviceTaintRule (on by default)",
        },
        "planned": "LockToDefault: true in 1.38; remove in 1.41",
        "src": {"1.35.4": (1240, 2217), "1.36.3": (1364, 2439), "1.37.2": (1475, 2593)},
    },
    "DRAExtendedResource": {
        "history": [
            ("1.34", False, ALPHA, False),
            ("1.36", True, BETA, False),
            ("1.37", True, GA, True),
        ],
        "depends_on": ("DynamicResourceAllocation",),
        "components": (APISERVER, SCHEDULER, KUBELET),
        "planned": "remove in 1.40",
        "src": {"1.35.4": (1248, 2221), "1.36.3": (1374, 2443), "1.37.2": (1487, 2597)},
    },
    "DRAPrioritizedList": {
        "history": [
            ("1.33", False, ALPHA, False),
            ("1.34", True, BETA, False),
            ("1.36", True, GA, False),
            ("1.37", True, GA, True),
        ],
        "depends_on": ("DynamicResourceAllocation",),
        "components": (APISERVER, SCHEDULER, CONTROLLER_MANAGER),
        "planned": "remove completely in 1.40",
        "src": {"1.35.4": (1256, 2225), "1.36.3": (1392, 2451), "1.37.2": (1519, 2611)},
    },
    "DRAAdminAccess": {
        "history": [
            ("1.32", False, ALPHA, False),
            ("1.34", True, BETA, False),
            ("1.36", True, GA, True),
        ],
        "depends_on": ("DynamicResourceAllocation",),
        "components": (APISERVER, SCHEDULER, CONTROLLER_MANAGER),
        "planned": "remove in 1.39",
        "src": {"1.35.4": (1227, 2211), "1.36.3": (1348, 2433), "1.37.2": (1451, 2583)},
    },
    "DRAPartitionableDevices": {
        "history": [("1.33", False, ALPHA, False), ("1.36", True, BETA, False)],
        "depends_on": ("DynamicResourceAllocation",),
        "components": (APISERVER, SCHEDULER),
        "src": {"1.35.4": (1252, 2223), "1.36.3": (1387, 2449), "1.37.2": (1510, 2607)},
    },
    "DRAConsumableCapacity": {
        "history": [("1.34", False, ALPHA, False), ("1.36", True, BETA, False)],
        "depends_on": ("DynamicResourceAllocation",),
        "components": (APISERVER, SCHEDULER),
        "src": {"1.35.4": (1232, 2213), "1.36.3": (1354, 2435), "1.37.2": (1457, 2585)},
    },
    "DRAResourceClaimDeviceStatus": {
        "history": [
            ("1.32", False, ALPHA, False),
            ("1.33", True, BETA, False),
            ("1.37", True, GA, True),
        ],
        # The Go dependency list is empty on purpose: "Soft dependency on DynamicResourceAllocation
        # due to on/off-by-default conflict" (1.37.2 line 2613).
        "depends_on": (),
        "components": (APISERVER, SCHEDULER),
        "planned": "remove in 1.40",
        "src": {"1.35.4": (1261, 2227), "1.36.3": (1398, 2453), "1.37.2": (1527, 2613)},
    },
    "DRADeviceBindingConditions": {
        "history": [("1.34", False, ALPHA, False), ("1.36", True, BETA, False)],
        "depends_on": ("DynamicResourceAllocation", "DRAResourceClaimDeviceStatus"),
        "components": (APISERVER, SCHEDULER),
        "src": {"1.35.4": (1236, 2215), "1.36.3": (1359, 2437), "1.37.2": (1466, 2589)},
    },
    # ---- well-known GA gates: locked ones, and ones 1.37 removed -----------------------------
    "ExecProbeTimeout": {
        "history": [("1.20", True, GA, False), ("1.35", True, GA, True)],
        "depends_on": (),
        # once a kubelet gate; no code reads features.ExecProbeTimeout in v1.36.3 or v1.37.2 any more
        "components": (),
        "planned": "remove in v1.38",
        "src": {"1.35.4": (1307, 2245), "1.36.3": (1459, 2477), "1.37.2": (1603, 2643)},
    },
    "InPlacePodVerticalScaling": {
        "history": [
            ("1.27", False, ALPHA, False),
            ("1.33", True, BETA, False),
            ("1.35", True, GA, True),
        ],
        "depends_on": (),
        "components": (APISERVER, SCHEDULER, KUBELET),
        "planned": "remove in 1.38",
        "src": {"1.35.4": (1376, 2273), "1.36.3": (1534, 2507), "1.37.2": (1698, 2681)},
    },
    "JobManagedBy": {
        "history": [
            ("1.30", False, ALPHA, False),
            ("1.32", True, BETA, False),
            ("1.35", True, GA, True),
        ],
        "depends_on": (),
        "components": (APISERVER, CONTROLLER_MANAGER),
        "planned": "remove in 1.38",
        "src": {"1.35.4": (1405, 2285), "1.36.3": (1558, 2517), "1.37.2": (1729, 2695)},
    },
    "JobPodReplacementPolicy": {
        "history": [
            ("1.28", False, ALPHA, False),
            ("1.29", True, BETA, False),
            ("1.34", True, GA, True),
        ],
        "removed_in": "1.37",
        "depends_on": (),
        "components": (APISERVER, CONTROLLER_MANAGER),
        "src": {"1.35.4": (1411, 2287), "1.36.3": (1564, 2519)},
    },
    "SidecarContainers": {
        "history": [
            ("1.28", False, ALPHA, False),
            ("1.29", True, BETA, False),
            ("1.33", True, GA, True),
        ],
        "removed_in": "1.37",
        "depends_on": (),
        "components": (APISERVER, SCHEDULER, CONTROLLER_MANAGER),  # readers in v1.36.3
        "src": {"1.35.4": (1808, 2443), "1.36.3": (1993, 2685)},
    },
}

#: Group/versions each release registers in its API scheme, per group gpusplit cares about.
#: ``--runtime-config`` naming any other version of these groups stops kube-apiserver
#: (apiserver resourceconfig/helpers.go:157).  Source: pkg/apis/<group>/install/install.go:37-43
#: of k8s.io/kubernetes v1.35.4, v1.36.3, v1.37.2.  (scheduling.k8s.io/v1beta1 in 1.35/1.36 is the
#: old PriorityClass version: registered, but nothing is served there.)
REGISTERED_API_VERSIONS: dict[str, dict[str, tuple[str, ...]]] = {
    "1.35": {
        "scheduling.k8s.io": ("v1", "v1beta1", "v1alpha1"),
        "resource.k8s.io": ("v1", "v1beta2", "v1beta1", "v1alpha3"),
    },
    "1.36": {
        "scheduling.k8s.io": ("v1", "v1beta1", "v1alpha2"),
        "resource.k8s.io": ("v1", "v1beta2", "v1beta1", "v1alpha3"),
    },
    "1.37": {
        "scheduling.k8s.io": ("v1", "v1beta1", "v1alpha3"),
        "resource.k8s.io": ("v1", "v1beta2", "v1beta1", "v1alpha3"),
    },
}

#: ``--runtime-config`` keys that are not group/versions (apiserver resourceconfig/helpers.go:60-63)
RUNTIME_CONFIG_MATCHERS = ("api/all", "api/ga", "api/beta", "api/alpha")

_VERSION_RE = re.compile(r"^v?(\d+)\.(\d+)(?:\.(\d+))?(?:[-+].*)?$")
_TRUE = ("1", "t", "T", "TRUE", "true", "True")
_FALSE = ("0", "f", "F", "FALSE", "false", "False")


class CatalogError(ValueError):
    """A version or value the catalog cannot answer for."""


def minor_of(version) -> str:
    """'v1.37.2', '1.37', '1.37.2+k3s1', 'v1.37.2-eks-1a2b' -> '1.37' (no range check)."""
    text = str(version).strip()
    m = _VERSION_RE.match(text)
    if not m:
        raise CatalogError(f"cannot read a Kubernetes version from {text!r} (expected e.g. v1.37.2)")
    return f"{int(m.group(1))}.{int(m.group(2))}"


def _key(minor: str) -> tuple[int, int]:
    major, _, mnr = minor.partition(".")
    return int(major), int(mnr)


def supported_minor(version) -> str:
    """Like :func:`minor_of`, but refuses a minor the catalog does not describe."""
    minor = minor_of(version)
    if minor not in SUPPORTED_MINORS:
        raise CatalogError(
            f"Kubernetes {minor} is not covered by the gpusplit feature-gate catalog "
            f"(covered: {', '.join(SUPPORTED_MINORS)}); refusing to guess gate names for it"
        )
    return minor


def parse_bool(value) -> bool:
    """Go strconv.ParseBool, which components use for gate values (feature_gate.go:382)."""
    if isinstance(value, bool):
        return value
    text = str(value).strip()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise CatalogError(f"invalid boolean {value!r} (Go ParseBool accepts 1,t,T,TRUE,true,True,0,f,...)")


def spec_at(name: str, version) -> dict | None:
    """The gate as a component of ``version`` sees it, or None when that component does not know it.

    Returns ``{name, minor, stage, default, locked, depends_on, components, runtime_config, api,
    removed_in, merged_into, planned}``.
    """
    minor = minor_of(version)
    entry = CATALOG.get(name)
    if entry is None:
        return None
    history = entry["history"]
    if _key(minor) < _key(history[0][0]):
        return None
    removed = entry.get("removed_in")
    if removed and _key(minor) >= _key(removed):
        return None
    since, default, stage, locked = history[0]
    for h_since, h_default, h_stage, h_locked in history:
        if _key(h_since) <= _key(minor):
            since, default, stage, locked = h_since, h_default, h_stage, h_locked
    return {
        "name": name,
        "minor": minor,
        "stage": stage,
        "since": since,
        "default": default,
        "locked": locked,
        "depends_on": tuple(entry.get("depends_on", ())),
        "components": tuple(entry.get("components", ())),
        "runtime_config": dict(entry.get("runtime_config", {}).get(minor, {})),
        "api": entry.get("api", {}).get(minor),
        "removed_in": removed,
        "merged_into": entry.get("merged_into"),
        "planned": entry.get("planned"),
    }


def introduced_in(name: str) -> str | None:
    entry = CATALOG.get(name)
    return entry["history"][0][0] if entry else None


def unknown_reason(name: str, version) -> str:
    """Why a component of ``version`` would not recognise ``name`` (for error messages)."""
    minor = minor_of(version)
    entry = CATALOG.get(name)
    if entry is None:
        return "not in the gpusplit catalog"
    removed = entry.get("removed_in")
    if removed and _key(minor) >= _key(removed):
        merged = entry.get("merged_into")
        if merged:
            return f"removed in {removed}, merged into {merged}"
        last = entry["history"][-1]
        state = "always on" if last[1] else "always off"
        return f"removed in {removed} ({last[2].upper()} since {last[0]}, {state})"
    return f"introduced in {entry['history'][0][0]}"


def catalog_rows(version) -> list[dict]:
    """Every catalog gate as seen by ``version`` (unknown ones with ``known: False``), sorted."""
    rows = []
    for name in sorted(CATALOG):
        spec = spec_at(name, version)
        if spec is None:
            rows.append({"name": name, "known": False, "reason": unknown_reason(name, version)})
        else:
            spec["known"] = True
            rows.append(spec)
    return rows


def _effective(minor: str, requested: dict[str, bool]) -> dict[str, bool]:
    """Enabled state of every catalog gate the release knows, after ``requested`` is applied."""
    state = {}
    specs = {}
    for name in CATALOG:
        spec = spec_at(name, minor)
        if spec is not None:
            specs[name] = spec
            state[name] = spec["default"]
    for special, stage in SPECIAL_GATES.items():
        if special in requested:
            for name, spec in specs.items():
                if spec["stage"] == stage and not spec["locked"] and name not in requested:
                    state[name] = requested[special]
    for name, value in requested.items():
        if name in state:
            state[name] = value
    return state


def _fmt_list(names) -> str:
    # Go's %v of a []Feature: [A B]
    return "[" + " ".join(names) + "]"


def _issue(severity, kind, name, message):
    return {"severity": severity, "kind": kind, "name": name, "message": message}


def check_gates(version, gates: dict, *, allow_uncatalogued: bool = False):
    """Structured form of :func:`validate_gates`: ``(issues, runtime_config)``.

    Each issue is ``{severity: error|warning, kind: feature-gate|dependency, name, message}``.
    """
    issues: list[dict] = []
    runtime_config: dict[str, str] = {}
    try:
        minor = supported_minor(version)
    except CatalogError as exc:
        return [_issue("error", "version", str(version), str(exc))], runtime_config

    requested: dict[str, bool] = {}
    for name, raw in (gates or {}).items():
        try:
            requested[str(name)] = parse_bool(raw)
        except CatalogError:
            message = f"invalid value of {name}={raw}: not a boolean"
            issues.append(_issue("error", "feature-gate", str(name), message))

    for name in sorted(requested):
        value = requested[name]
        shown = str(value).lower()
        if name in SPECIAL_GATES:
            issues.append(
                _issue(
                    "warning",
                    "feature-gate",
                    name,
                    f"{name}={shown} flips every {SPECIAL_GATES[name]} gate that is not set explicitly; "
                    "gpusplit checks dependencies with that applied but cannot vouch for gates outside "
                    "its catalog",
                )
            )
            continue
        spec = spec_at(name, minor)
        if spec is None:
            if name in CATALOG:
                issues.append(
                    _issue(
                        "error",
                        "feature-gate",
                        name,
                        f"unrecognized feature gate: {name} (Kubernetes {minor}: "
                        f"{unknown_reason(name, minor)}); every component given this gate exits at start",
                    )
                )
            elif allow_uncatalogued:
                issues.append(
                    _issue(
                        "warning",
                        "uncatalogued",
                        name,
                        f"{name} is not in the gpusplit catalog; whether Kubernetes {minor} knows it is "
                        "unchecked (an unknown name stops the component at start)",
                    )
                )
            else:
                issues.append(
                    _issue(
                        "error",
                        "uncatalogued",
                        name,
                        f"{name} is not in the gpusplit feature-gate catalog for Kubernetes {minor}; "
                        "refusing it (an unknown name stops the component with 'unrecognized feature "
                        f"gate: {name}'); set allow_uncatalogued to pass gates gpusplit does not know",
                    )
                )
            continue
        if spec["locked"] and value != spec["default"]:
            issues.append(
                _issue(
                    "error",
                    "feature-gate",
                    name,
                    f"cannot set feature gate {name} to {shown}, feature is locked to "
                    f"{str(spec['default']).lower()} (Kubernetes {minor}, {spec['stage'].upper()} since "
                    f"{spec['since']})",
                )
            )
            continue
        if spec["stage"] == GA:
            note = f" ({spec['planned']})" if spec.get("planned") else ""
            issues.append(
                _issue(
                    "warning",
                    "feature-gate",
                    name,
                    f"{name} is GA in {minor}; setting it is a no-op override that will stop the "
                    f"components once the gate is removed{note}",
                )
            )
        elif spec["stage"] == DEPRECATED:
            issues.append(
                _issue(
                    "warning",
                    "feature-gate",
                    name,
                    f"{name} is deprecated in {minor} and will be removed in a future release",
                )
            )
        elif spec["stage"] == ALPHA and value:
            issues.append(
                _issue(
                    "warning",
                    "feature-gate",
                    name,
                    f"{name} is alpha in {minor}: off by default, not for production clusters",
                )
            )

    # Like featuregate.unsafeSetFromMap, a refused value (unknown, locked) never reaches the state the
    # dependency check looks at.
    accepted = {
        name: value
        for name, value in requested.items()
        if name in SPECIAL_GATES
        or (
            spec_at(name, minor) is not None
            and not (spec_at(name, minor)["locked"] and value != spec_at(name, minor)["default"])
        )
    }
    state = _effective(minor, accepted)
    for name in sorted(state):
        if not state[name]:
            continue
        disabled = [dep for dep in CATALOG[name].get("depends_on", ()) if not state.get(dep, False)]
        if disabled:
            issues.append(
                _issue(
                    "error",
                    "dependency",
                    name,
                    f"{name} is enabled, but depends on features that are disabled: {_fmt_list(disabled)}",
                )
            )
        runtime_config.update(spec_at(name, minor)["runtime_config"])
    return issues, runtime_config


def validate_gates(version, gates: dict, *, allow_uncatalogued: bool = False):
    """Check a requested ``--feature-gates`` map against what components of ``version`` accept.

    Returns ``(errors, warnings, runtime_config)``: ``errors`` are what would stop a component at
    start (unknown or removed gate, locked gate set to the other value, a dependency left disabled,
    a non-boolean value); ``warnings`` are accepted but worth saying; ``runtime_config`` is the
    ``--runtime-config`` entries kube-apiserver needs so that the enabled gates' APIs are served
    (e.g. ``{'scheduling.k8s.io/v1beta1': 'true'}`` for GenericWorkload on 1.37).

    ``gates`` should be the complete list a component will get (existing plus new), because
    dependencies are checked over the whole set.  A gate outside the catalog is an error unless
    ``allow_uncatalogued`` (then a warning: gpusplit cannot tell whether that release knows it).
    """
    issues, runtime_config = check_gates(version, gates, allow_uncatalogued=allow_uncatalogued)
    errors = [i["message"] for i in issues if i["severity"] == "error"]
    warnings = [i["message"] for i in issues if i["severity"] == "warning"]
    return errors, warnings, runtime_config


def runtime_config_enables(runtime_config: dict, key: str) -> bool:
    """Whether ``--runtime-config`` as given turns on group/version ``key`` (explicitly or via api/*)."""
    rc = {k: ("true" if v in ("", None) else str(v)) for k, v in (runtime_config or {}).items()}

    def truthy(k):
        try:
            return parse_bool(rc[k])
        except CatalogError:
            return False

    if key in rc:
        return truthy(key)
    version = key.split("/")[1] if "/" in key else ""
    level = "api/alpha" if "alpha" in version else "api/beta" if "beta" in version else "api/ga"
    if level in rc:
        return truthy(level)
    if "api/all" in rc:
        return truthy("api/all")
    return False


def runtime_config_problems(version, runtime_config: dict) -> list[tuple[str, str]]:
    """``--runtime-config`` entries kube-apiserver of ``version`` would refuse at start.

    Returns ``[(key, message)]``.

    Only the groups in :data:`REGISTERED_API_VERSIONS` are judged; kube-apiserver skips groups it
    does not have at all (helpers.go:151), so those are left alone here too.
    """
    minor = supported_minor(version)
    problems = []
    registered = REGISTERED_API_VERSIONS[minor]
    for key in sorted(runtime_config or {}):
        value = runtime_config[key]
        if key in RUNTIME_CONFIG_MATCHERS:
            if str(value) not in ("true", "false"):
                problems.append((key, f"invalid value {key}={value}"))
            continue
        tokens = key.split("/")
        if len(tokens) not in (2, 3):
            continue
        group, gv_version = tokens[0], tokens[1]
        if group in registered and gv_version not in registered[group]:
            problems.append(
                (
                    key,
                    f"group version {group}/{gv_version} that has not been registered (Kubernetes "
                    f"{minor} knows {group} {', '.join(registered[group])}); kube-apiserver exits at start",
                )
            )
            continue
        if value not in ("", None):
            try:
                parse_bool(value)
            except CatalogError:
                problems.append((key, f"invalid value of {key}: {value}"))
    return problems


def _as_gate_map(value) -> dict:
    if not value:
        return {}
    if isinstance(value, dict):
        return dict(value)
    parsed = {}
    for part in str(value).split(","):
        if not part:
            continue
        name, sep, raw = part.partition("=")
        parsed[name.strip()] = raw.strip() if sep else ""
    return parsed


def upgrade_preflight(current_flags_per_component: dict, target_version, *, allow_uncatalogued: bool = False):
    """What in today's control-plane flags would stop a component of ``target_version``.

    ``current_flags_per_component`` maps a component name (``kube-apiserver``, ``kube-scheduler``,
    ``kube-controller-manager``, ``kubelet``, ...) to ``{"feature_gates": ..., "runtime_config":
    ...}``; each value may be a dict or the flag's text (``"A=true,B=false"``).

    Returns a list of findings ``{component, kind, name, severity, message}``; ``kind`` is one of
    ``feature-gate``, ``dependency``, ``uncatalogued``, ``runtime-config``; ``severity`` is
    ``error`` (the component would not start) or ``warning``.  Gates outside the catalog are errors
    unless ``allow_uncatalogued`` (gpusplit cannot tell whether the target still knows them).
    """
    minor = supported_minor(target_version)
    findings: list[dict] = []
    for component in sorted(current_flags_per_component or {}):
        flags = current_flags_per_component[component] or {}
        gates = _as_gate_map(flags.get("feature_gates"))
        runtime_config = _as_gate_map(flags.get("runtime_config"))
        issues, needed = check_gates(minor, gates, allow_uncatalogued=allow_uncatalogued)
        for issue in issues:
            findings.append(dict(issue, component=component))
        if component != APISERVER:
            if runtime_config and component in CONTROL_PLANE + (KUBELET,):
                message = f"{component} has no --runtime-config flag (kube-apiserver only); it exits with 'unknown flag'"
                findings.append(
                    dict(_issue("error", "runtime-config", "runtime-config", message), component=component)
                )
            continue
        for key, message in runtime_config_problems(minor, runtime_config):
            findings.append(dict(_issue("error", "runtime-config", key, message), component=component))
        for key, value in sorted(needed.items()):
            if runtime_config_enables(runtime_config, key):
                continue
            message = (
                f"the enabled gates need --runtime-config {key}={value} on {minor}; without it "
                "their API is not served and the scheduler and controller-manager cannot watch it"
            )
            findings.append(dict(_issue("warning", "runtime-config", key, message), component=component))
    return findings


def migrate_gates(gates: dict, target_version):
    """Rewrite a gate map for ``target_version``: drop gates it no longer knows, carry merged ones.

    ``GangScheduling=true`` on the way to 1.37 becomes ``GenericWorkload=true`` (unless
    GenericWorkload is set explicitly).  Returns ``(new_gates, notes)``.
    """
    minor = supported_minor(target_version)
    new: dict[str, bool] = {}
    notes: list[str] = []
    requested = {name: parse_bool(value) for name, value in (gates or {}).items()}
    for name, value in requested.items():
        if name in CATALOG and spec_at(name, minor) is None:
            merged = CATALOG[name].get("merged_into")
            note = f"dropped {name}={str(value).lower()}: {unknown_reason(name, minor)}"
            if merged and value and merged not in requested:
                new[merged] = True
                note += f"; set {merged}=true instead"
            notes.append(note)
            continue
        new[name] = value
    return new, notes


def migrate_runtime_config(runtime_config: dict, target_version, gates: dict | None = None):
    """Drop group/versions ``target_version`` does not register and add those ``gates`` need there.

    Returns ``(new_runtime_config, notes)``.
    """
    minor = supported_minor(target_version)
    registered = REGISTERED_API_VERSIONS[minor]
    new: dict[str, str] = {}
    notes: list[str] = []
    for key, value in (runtime_config or {}).items():
        tokens = key.split("/")
        if len(tokens) in (2, 3) and tokens[0] in registered and tokens[1] not in registered[tokens[0]]:
            notes.append(f"dropped {key}={value}: Kubernetes {minor} does not register it")
            continue
        new[key] = value
    if gates is not None:
        _errors, _warnings, needed = validate_gates(minor, gates, allow_uncatalogued=True)
        for key, value in needed.items():
            if key not in new:
                new[key] = value
                notes.append(f"added {key}={value}: needed by the enabled gates on {minor}")
    return new, notes


def markdown_table() -> str:
    """The catalog as a Markdown table (docs/feature-gates.md embeds it; a unit test keeps them equal)."""

    def cell(name, minor):
        spec = spec_at(name, minor)
        if spec is None:
            return "-"
        text = f"{spec['stage']} {'on' if spec['default'] else 'off'}"
        if spec["locked"]:
            text += " locked"
        if spec["runtime_config"]:
            text += " + " + ", ".join(f"`{k}`" for k in spec["runtime_config"])
        return text

    head = "| gate | " + " | ".join(SUPPORTED_MINORS) + " | depends on | components | removed |"
    rule = "|---|" + "---|" * len(SUPPORTED_MINORS) + "---|---|---|"
    rows = [head, rule]
    for name in CATALOG:
        entry = CATALOG[name]
        removed = entry.get("removed_in") or ""
        if removed and entry.get("merged_into"):
            removed += f" (merged into {entry['merged_into']})"
        rows.append(
            f"| {name} | "
            + " | ".join(cell(name, m) for m in SUPPORTED_MINORS)
            + f" | {', '.join(entry.get('depends_on', ())) or '-'} | {', '.join(entry.get('components', ())) or '-'} | "
            + f"{removed or '-'} |"
        )
    return "\n".join(rows) + "\n"
