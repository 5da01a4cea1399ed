# Copyright: gpusplit contributors
# Apache-2.0
"""Feature-gate checks before a flag is written or a cluster is upgraded, and the migration of gate sets.

Private to the collection.

Pure logic: no Ansible imports, no I/O.  Modules and roles call :func:`validate_gates` before they
write a gate into a control-plane manifest, and :func:`upgrade_preflight` before an upgrade, because
a wrong gate does not fail softly: each Kubernetes component parses ``--feature-gates`` at start and
exits on the first problem (k8s.io/component-base v0.37.2 featuregate/feature_gate.go):

* line 421  ``unrecognized feature gate: X``                      (gate unknown to that release)
* line 426  ``cannot set feature gate X to Y, feature is locked to Z``
* line 436  ``cannot set feature gate X to Y, feature is PreAlpha at emulated version V, ...``
* line 466  ``X is enabled, but depends on features that are disabled: [A B]``

and kube-apiserver exits when ``--runtime-config`` names a group/version the release does not know
(k8s.io/apiserver v0.37.2 pkg/server/resourceconfig/helpers.go:157
``group version G/V that has not been registered``).  What a release knows comes from the catalog
(gates.py).
"""

from __future__ import annotations

from ansible_collections.gpusplit.k8s.plugins.module_utils._control_plane.components import (
    APISERVER,
    CONTROL_PLANE,
    KUBELET,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._control_plane.flag_values import flag_map
from ansible_collections.gpusplit.k8s.plugins.module_utils._control_plane.gates import (
    ALPHA,
    DEPRECATED,
    GA,
    GPUSPLIT_GATES,
    KNOWN_GATES,
    NOT_REGISTERED,
    PREALPHA,
    REGISTERED_API_VERSIONS,
    RUNTIME_CONFIG_MATCHERS,
    SPECIAL_GATES,
    CatalogError,
    is_kubernetes_gate,
    parse_bool,
    spec_at,
    spec_for,
    suggest,
    supported_minor,
    unknown_reason,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import a_type_name


def _effective(minor: str, requested: dict[str, bool]) -> dict[str, bool]:
    """Enabled state of every gate the release registers, after ``requested`` is applied."""
    state = {}
    stages = {}
    for name, gate in KNOWN_GATES[minor].items():
        spec = spec_for(gate["specs"], minor)
        state[name] = bool(spec and spec[1])
        stages[name] = spec[2] if spec else PREALPHA
    for special, stage in SPECIAL_GATES.items():
        if special in requested:
            for name in state:
                if stages[name] == stage and name not in requested:
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

    Each issue is ``{severity: error|warning, kind: feature-gate|dependency|uncatalogued|version,
    name, message}``.  ``feature-gate``: a Kubernetes gate the release does not accept as given
    (removed, not yet there, locked, PreAlpha) or a note on it; ``uncatalogued``: a name no covered
    release registers (a typo, or a gate of a patched build).
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

    accepted: dict[str, bool] = {}
    for name in sorted(requested):
        value = requested[name]
        shown = str(value).lower()
        if name in SPECIAL_GATES:
            accepted[name] = value
            issues.append(
                _issue(
                    "warning",
                    "feature-gate",
                    name,
                    f"{name}={shown} flips every {SPECIAL_GATES[name]} gate that is not set explicitly; "
                    "gpusplit checks the dependencies with that applied",
                )
            )
            continue
        spec = spec_at(name, minor)
        if spec is None:
            if is_kubernetes_gate(name):
                issues.append(
                    _issue(
                        "error",
                        "feature-gate",
                        name,
                        f"unrecognized feature gate: {name} (Kubernetes {minor}: "
                        f"{unknown_reason(name, minor)}); every component given this gate exits at start",
                    )
                )
                continue
            meant = suggest(name, minor)
            hint = f" Did you mean {meant}?" if meant else ""
            if allow_uncatalogued:
                issues.append(
                    _issue(
                        "warning",
                        "uncatalogued",
                        name,
                        f"{name} is not in the gpusplit catalog: {NOT_REGISTERED}; passed unchecked on "
                        f"Kubernetes {minor} because allow_uncatalogued is set (an unknown name stops the "
                        "component at start)",
                    )
                )
            else:
                issues.append(
                    _issue(
                        "error",
                        "uncatalogued",
                        name,
                        f"{name} is not in the gpusplit feature-gate catalog: {NOT_REGISTERED}.{hint} "
                        f"Refusing it on Kubernetes {minor}: an unknown name stops the component with "
                        f"'unrecognized feature gate: {name}' (allow_uncatalogued passes it, for builds "
                        "that register gates of their own)",
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
        if spec["stage"] == PREALPHA:
            issues.append(
                _issue(
                    "error",
                    "feature-gate",
                    name,
                    f"cannot set feature gate {name} to {shown}, feature is PreAlpha at Kubernetes {minor} "
                    f"(its first spec is for {KNOWN_GATES[minor][name]['specs'][0][0]})",
                )
            )
            continue
        accepted[name] = value
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
    state = _effective(minor, accepted)
    known = KNOWN_GATES[minor]
    for name in sorted(state):
        if not state[name]:
            continue
        disabled = [dep for dep in known[name]["depends_on"] if not state.get(dep, False)]
        if disabled:
            issues.append(
                _issue(
                    "error",
                    "dependency",
                    name,
                    f"{name} is enabled, but depends on features that are disabled: {_fmt_list(disabled)}",
                )
            )
        extra = GPUSPLIT_GATES.get(name)
        if extra:
            runtime_config.update(extra.get("runtime_config", {}).get(minor, {}))
    return issues, runtime_config


def validate_gates(version, gates: dict, *, allow_uncatalogued: bool = False):
    """Check a requested ``--feature-gates`` map against what components of ``version`` accept.

    Returns ``(errors, warnings, runtime_config)``: ``errors`` are what would stop a component at
    start (unknown or removed gate, locked gate set to the other value, a dependency left disabled,
    a non-boolean value); ``warnings`` are accepted but worth saying; ``runtime_config`` is the
    ``--runtime-config`` entries kube-apiserver needs so that the enabled gates' APIs are served
    (e.g. ``{'scheduling.k8s.io/v1beta1': 'true'}`` for GenericWorkload on 1.37).

    ``gates`` should be the complete list a component will get (existing plus new), because
    dependencies are checked over the whole set.  A name no covered release registers (a typo, with
    a suggestion when one is close) is an error unless ``allow_uncatalogued`` (then a warning, for
    builds that register gates of their own); a removed gate is an error either way.
    """
    issues, runtime_config = check_gates(version, gates, allow_uncatalogued=allow_uncatalogued)
    errors = [i["message"] for i in issues if i["severity"] == "error"]
    warnings = [i["message"] for i in issues if i["severity"] == "warning"]
    return errors, warnings, runtime_config


def runtime_config_on(value) -> bool:
    """Whether a ``--runtime-config`` value switches its key on.

    No value (``api/beta``, ``key=``, None) means on, as in kube-apiserver; otherwise Go ParseBool,
    and a value it refuses counts as off (:func:`runtime_config_problems` reports it).
    """
    if value in ("", None):
        return True
    try:
        return parse_bool(value)
    except CatalogError:
        return False


def runtime_config_enables(runtime_config: dict, key: str) -> bool:
    """Whether ``--runtime-config`` as given turns on group/version ``key`` (explicitly or via api/*)."""
    rc = dict(runtime_config or {})

    def truthy(k):
        return runtime_config_on(rc[k])

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


def upgrade_preflight(current_flags_per_component: dict, target_version, *, allow_uncatalogued: bool = False):
    """What in today's control-plane flags would stop a component of ``target_version``.

    ``current_flags_per_component`` maps a component name (``kube-apiserver``, ``kube-scheduler``,
    ``kube-controller-manager``, ``kubelet``, ...) to ``{"feature_gates": ..., "runtime_config":
    ...}``; each value may be a dict or the flag's text (``"A=true,B=false"``).

    Returns a list of findings ``{component, kind, name, severity, message}``; ``kind`` is one of
    ``feature-gate``, ``dependency``, ``uncatalogued``, ``runtime-config``; ``severity`` is
    ``error`` (the component would not start) or ``warning``.  A gate ``target_version`` removed is a
    ``feature-gate`` error whatever ``allow_uncatalogued`` says; names no covered release registers
    are ``uncatalogued`` errors unless ``allow_uncatalogued`` (then warnings).
    """
    minor = supported_minor(target_version)
    findings: list[dict] = []
    for component in sorted(current_flags_per_component or {}):
        flags = current_flags_per_component[component] or {}
        # values as given: check_gates judges them
        gates = flag_map(flags.get("feature_gates"))
        runtime_config = flag_map(flags.get("runtime_config"))
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
        if is_kubernetes_gate(name) and spec_at(name, minor) is None:
            merged = GPUSPLIT_GATES.get(name, {}).get("merged_into")
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


class UnreadableObjectsError(CatalogError):
    """Objects exist that the upgrade target's kube-apiserver could not read back."""


#: The variable that has the upgrade preflight delete the objects the target cannot read back.
DELETE_UNREADABLE_VARIABLE = "gpusplit_upgrade_delete_unreadable"


def unreadable_kinds(served_apis: dict, target_version) -> list[dict]:
    """The kinds the cluster serves in a group/version that ``target_version`` does not register.

    Objects of such a kind are stored in etcd in that version, which the target's kube-apiserver
    cannot decode (GenericWorkload's ``scheduling.k8s.io/v1alpha2`` Workloads and PodGroups on the way
    from 1.36 to 1.37).  ``served_apis`` is kubernetes.core.k8s_cluster_info's ``apis``
    (``{group/version: {kind: resource}}``).  Only the groups of :data:`REGISTERED_API_VERSIONS` are
    judged.  Returns ``[{"api_version", "kind"}]``, sorted.
    """
    minor = supported_minor(target_version)
    registered = REGISTERED_API_VERSIONS[minor]
    if not isinstance(served_apis, dict):
        raise CatalogError(
            f"served APIs: expected a map of group/version to kinds, got {a_type_name(served_apis)}"
        )
    out = []
    for group_version in sorted(served_apis):
        group, _sep, version = str(group_version).rpartition("/")
        if group not in registered or version in registered[group]:
            continue
        for kind in sorted(served_apis[group_version] or {}):
            out.append({"api_version": group_version, "kind": kind})
    return out


def _object_ref(obj: dict, api_version: str, kind: str) -> dict:
    meta = obj.get("metadata") or {}
    ref = {
        "api_version": obj.get("apiVersion") or api_version,
        "kind": obj.get("kind") or kind,
        "name": meta.get("name"),
    }
    if meta.get("namespace"):
        ref["namespace"] = meta["namespace"]
    return ref


def object_label(ref: dict) -> str:
    """``PodGroup team-a/train (scheduling.k8s.io/v1alpha2)``; a cluster-scoped object without a namespace."""
    where = f"{ref['namespace']}/{ref['name']}" if ref.get("namespace") else ref["name"]
    return f"{ref['kind']} {where} ({ref['api_version']})"


def unreadable_objects(kinds: list, found: dict, target_version, *, delete: bool = False) -> list[dict]:
    """The objects of ``kinds`` (:func:`unreadable_kinds`) that exist, to delete before the upgrade.

    ``found`` maps ``"<api_version> <kind>"`` to the objects listed in that version.  Where any exist and
    ``delete`` is false, an :class:`UnreadableObjectsError` names each (kind, namespace/name, version) and
    the variable that deletes them; with ``delete``, the list is returned for deletion, sorted.
    """
    minor = supported_minor(target_version)
    refs = []
    for item in kinds or []:
        key = f"{item['api_version']} {item['kind']}"
        for obj in (found or {}).get(key) or []:
            if not isinstance(obj, dict):
                raise CatalogError(f"{key}: expected objects as mappings, got {a_type_name(obj)}")
            refs.append(_object_ref(obj, item["api_version"], item["kind"]))
    refs.sort(key=lambda r: (r["api_version"], r["kind"], r.get("namespace") or "", r["name"] or ""))
    if refs and not delete:
        versions = sorted({r["api_version"] for r in refs})
        raise UnreadableObjectsError(
            f"Kubernetes {minor} does not register {', '.join(versions)}, so after the upgrade its "
            f"kube-apiserver cannot read back these objects, stored in that version: "
            f"{'; '.join(object_label(r) for r in refs)}. Delete them before the upgrade (and create them "
            f"again in a version {minor} serves), or set {DELETE_UNREADABLE_VARIABLE}=true to have this "
            "preflight delete exactly these. Nothing was changed."
        )
    return refs


#: ``validate_version`` values that turn the check of a flag writer off (explicitly; it warns then).
VALIDATE_OFF = ("off", "false", "no", "none")


def validation_minor(value, found, source: str) -> str | None:
    """The minor a flag writer checks its result against, or None when ``value`` turns the check off.

    ``value`` is the module's ``validate_version``: ``auto`` (also when None), a version, or one of
    :data:`VALIDATE_OFF`.  ``auto`` takes ``found``, the version the edited file itself names (a
    manifest's image tag, a ClusterConfiguration's kubernetesVersion, ``k3s --version``); ``source``
    says where that was looked for.  A version that is missing, unreadable or not covered by the
    catalog is one :class:`CatalogError` (the message said once, whatever is checked afterwards).
    """
    text = "auto" if value is None else str(value).strip()
    if text.lower() in VALIDATE_OFF:
        return None
    hint = "give validate_version (e.g. 1.37.2), or validate_version=off to write the gates unchecked"
    if text.lower() == "auto":
        if not found:
            raise CatalogError(f"validate_version=auto but {source} names no Kubernetes version; {hint}")
        try:
            return supported_minor(found)
        except CatalogError as exc:
            raise exc.prefixed(f"validate_version=auto took {found!r} from {source}: ", f"; {hint}") from None
    try:
        return supported_minor(text)
    except CatalogError as exc:
        raise exc.prefixed("validate_version: ", f"; {hint}") from None


def validate_flag_sets(minor: str, flag_sets: dict, *, allow_uncatalogued: bool = False, apiserver=APISERVER):
    """:func:`validate_gates` and :func:`runtime_config_problems` for every component a writer changes.

    ``flag_sets``: ``{component: {"feature_gates": ..., "runtime_config": ...}}`` as they will be
    (``apiserver`` is the key of kube-apiserver there, whose runtime-config is checked).  With more
    than one component each message starts with its key.  Returns ``(errors, warnings,
    runtime_config needed by kube-apiserver)``.
    """
    errors: list[str] = []
    warnings: list[str] = []
    needed: dict[str, str] = {}
    many = len(flag_sets) > 1
    for component, flags in flag_sets.items():
        prefix = f"{component}: " if many else ""
        errs, warns, need = validate_gates(
            minor, flags.get("feature_gates") or {}, allow_uncatalogued=allow_uncatalogued
        )
        if component == apiserver:
            needed = need
            errs += [msg for _key, msg in runtime_config_problems(minor, flags.get("runtime_config") or {})]
        errors += [prefix + e for e in errs]
        warnings += [prefix + w for w in warns]
    return errors, warnings, needed
