#!/usr/bin/python
# Copyright: gpusplit contributors
# Apache License 2.0 (see galaxy.yml)
"""Ansible module gpusplit.k8s.feature_gate_preflight."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: feature_gate_preflight
short_description: Check feature gates for a Kubernetes version before they reach a control plane
version_added: "0.1.0"
description:
  - Validates requested feature gates against the gpusplit catalog for O(version) (Kubernetes
    1.35, 1.36 or 1.37) and returns the C(--runtime-config) entries kube-apiserver needs for them.
  - Reads the flags the control plane runs with today (static-pod manifests in O(manifests_dir),
    k3s/rke2 config files in O(rancher_config_files), a kubelet config in O(kubelet_config), or
    O(current_flags) given directly) and reports every gate or C(--runtime-config) entry that would
    stop a component of O(version), for example C(GangScheduling) on 1.37 (removed, merged into
    C(GenericWorkload)) or C(scheduling.k8s.io/v1alpha2) (not served by 1.37).
  - Changes nothing. Fails when anything would stop a component, unless O(fail_on_error=false).
  - Refuses a check that would read nothing (no gates and no flags to look at, a mistyped
    directory, a file that is not there), naming the option and the path.
options:
  version:
    description: The Kubernetes version to check against (the upgrade target, or the running one).
    type: str
    required: true
  feature_gates:
    description: Gates that are about to be requested, name to boolean.
    type: dict
    default: {}
  manifests_dir:
    description:
      - Directory holding C(kube-apiserver.yaml), C(kube-scheduler.yaml) and
        C(kube-controller-manager.yaml).
      - Refused when it is empty, no directory (a mistyped path), or holds none of the three; a check
        that reads nothing must not pass. A missing one of the three is a warning.
    type: path
  rancher_config_files:
    description:
      - k3s/rke2 C(config.yaml) followed by its C(config.yaml.d/*.yaml) drop-ins, in the order k3s reads
        them (file-name order). A missing file is skipped (k3s runs without C(config.yaml)); when none
        of them exists the module warns that it saw no k3s/rke2 config file.
    type: list
    elements: path
    default: []
  kubelet_config:
    description:
      - A KubeletConfiguration file whose C(featureGates) are checked as component C(kubelet). Refused
        when it does not exist or cannot be read.
    type: path
  current_flags:
    description:
      - Flags per component given directly, component name to a dict with keys C(feature_gates) and
        C(runtime_config); each value a map or the flag text (C(A=true,B=false)). Merged over what
        the files say.
    type: dict
    default: {}
  allow_uncatalogued:
    description: Treat gate names outside the gpusplit catalog as warnings instead of errors.
    type: bool
    default: false
  fail_on_error:
    description: Fail when a requested gate or a current flag would stop a component of O(version).
    type: bool
    default: true
requirements:
  - PyYAML (python3-yaml) on the host the module runs on
extends_documentation_fragment:
  - gpusplit.k8s.attributes.check_mode_no_diff
author:
  - gpusplit contributors (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Is GenericWorkload valid on 1.37, and which API must be enabled?
  gpusplit.k8s.feature_gate_preflight:
    version: "1.37"
    feature_gates:
      GenericWorkload: true
  register: gates

- name: Before upgrading a kubeadm control plane to 1.37, find gates that would stop it
  gpusplit.k8s.feature_gate_preflight:
    version: "1.37.2"
    manifests_dir: /etc/kubernetes/manifests
    kubelet_config: /var/lib/kubelet/config.yaml
  register: preflight

- name: Same for an rke2 server
  gpusplit.k8s.feature_gate_preflight:
    version: "1.37"
    rancher_config_files:
      - /etc/rancher/rke2/config.yaml
      - /etc/rancher/rke2/config.yaml.d/50-gpusplit.yaml
"""

RETURN = r"""
minor:
  description: The Kubernetes minor checked.
  type: str
  returned: always
  sample: "1.37"
gate_errors:
  description: Problems with O(feature_gates) that would stop a component.
  type: list
  elements: str
  returned: always
gate_warnings:
  description: Accepted but noteworthy (GA, alpha, uncatalogued gates); also emitted as Ansible warnings.
  type: list
  elements: str
  returned: always
runtime_config:
  description: C(--runtime-config) entries kube-apiserver needs for O(feature_gates) on O(version).
  type: dict
  returned: always
  sample: {scheduling.k8s.io/v1beta1: "true"}
current_flags:
  description: The flags found per component.
  type: dict
  returned: always
findings:
  description: Per-component findings for the current flags on O(version).
  type: list
  elements: dict
  returned: always
  sample:
    - component: kube-scheduler
      kind: feature-gate
      name: GangScheduling
      severity: error
      message: >-
        unrecognized feature gate: GangScheduling (Kubernetes 1.37: removed in 1.37,
        merged into GenericWorkload); every component given this gate exits at start
stale_gates:
  description: Gate names in the current flags that would stop a component of O(version), per component.
  type: dict
  returned: always
  sample: {kube-scheduler: [GangScheduling]}
migrated_feature_gates:
  description:
    - Per component, the current gates rewritten for O(version) (removed gates dropped, merged ones carried).
  type: dict
  returned: always
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpusplit.k8s.plugins.module_utils._control_plane.components import CONTROL_PLANE
from ansible_collections.gpusplit.k8s.plugins.module_utils._control_plane.flag_values import (
    FlagEditError,
    flag_map,
    parse_feature_gates,
    parse_runtime_config,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._control_plane.gate_preflight import (
    migrate_gates,
    upgrade_preflight,
    validate_gates,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._control_plane.gates import (
    CatalogError,
    supported_minor,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._control_plane.module_io import run_module
from ansible_collections.gpusplit.k8s.plugins.module_utils._control_plane.rancher import (
    rancher_component_flags,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._control_plane.static_pod import parse_static_pod
from ansible_collections.gpusplit.k8s.plugins.module_utils._control_plane.yaml_text import load_map
from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError, type_name
from ansible_collections.gpusplit.k8s.plugins.module_utils._host.files import read_text


def _manifests_flags(module: AnsibleModule, directory: str) -> dict:
    """The flags of the static-pod manifests in ``directory``; a directory that holds none is refused."""
    if not directory:
        raise GpusplitError(
            "manifests_dir is empty; give the static-pod manifest directory (e.g. /etc/kubernetes/manifests) "
            "or leave the option out"
        )
    if not os.path.isdir(directory):
        raise GpusplitError(
            f"manifests_dir {directory} is not a directory (mistyped?); give the static-pod manifest "
            "directory, e.g. /etc/kubernetes/manifests"
        )
    flags: dict[str, dict] = {}
    missing = []
    for component in CONTROL_PLANE:
        path = os.path.join(directory, f"{component}.yaml")
        if not os.path.isfile(path):
            missing.append(f"{component}.yaml")
            continue
        try:
            pod = parse_static_pod(read_text(path))
        except FlagEditError as exc:
            raise exc.prefixed(f"{path}: ") from None
        flags[component] = {"feature_gates": pod["feature_gates"], "runtime_config": pod["runtime_config"]}
    if not flags:
        raise GpusplitError(
            f"manifests_dir {directory} holds none of {', '.join(missing)}, so there is nothing to check; give "
            "the directory the kubelet reads static pods from (staticPodPath, /etc/kubernetes/manifests with "
            "kubeadm)"
        )
    if missing:
        module.warn(f"manifests_dir {directory} holds no {', '.join(missing)}; only the others were checked")
    return flags


def _rancher_flags(module: AnsibleModule, paths: list) -> dict:
    """The flags k3s/rke2 give each component from those of ``paths`` that exist.

    None existing is said (a default k3s install has no config.yaml: it runs with the flags of its
    command line, which this check cannot see), not passed over in silence.
    """
    for path in paths:
        if not path:
            raise GpusplitError("rancher_config_files holds an empty path; give config.yaml and its drop-ins")
    found = [path for path in paths if os.path.isfile(path)]
    if not found:
        module.warn(
            f"rancher_config_files: none of {', '.join(paths)} exists, so no k3s/rke2 config file was checked; "
            "flags given on the server's command line (its systemd unit) are not seen here"
        )
        return {}
    return rancher_component_flags([read_text(path) for path in found], found)


def _kubelet_flags(path: str) -> dict:
    """The kubelet's gates from its KubeletConfiguration ``path``; a file that is not there is refused."""
    if not path or not os.path.isfile(path):
        raise GpusplitError(
            f"kubelet_config {path or '(empty)'} is not a file; give the kubelet's KubeletConfiguration "
            "(its --config, /var/lib/kubelet/config.yaml with kubeadm) or leave the option out"
        )
    kubelet = load_map(read_text(path), path, of="KubeletConfiguration fields")
    gates = kubelet.get("featureGates") or {}
    if not isinstance(gates, dict):
        raise FlagEditError(
            f"{path}: featureGates: expected a mapping of gate name to boolean, got {type_name(gates)}"
        )
    return {"kubelet": {"feature_gates": dict(gates), "runtime_config": {}}} if gates else {}


def gather_current_flags(module: AnsibleModule) -> dict:
    p = module.params
    flags: dict[str, dict] = {}
    if p["manifests_dir"] is not None:
        flags.update(_manifests_flags(module, p["manifests_dir"]))
    if p["rancher_config_files"]:
        flags.update(_rancher_flags(module, p["rancher_config_files"]))
    if p["kubelet_config"] is not None:
        flags.update(_kubelet_flags(p["kubelet_config"]))
    for component, given in (p["current_flags"] or {}).items():
        given = given or {}
        field = f"current_flags.{component}"
        if not isinstance(given, dict):
            raise FlagEditError(
                f"{field}: expected a mapping with feature_gates and/or runtime_config, "
                f"got {type_name(given)}"
            )
        entry = flags.setdefault(component, {"feature_gates": {}, "runtime_config": {}})
        for key, parse in (("feature_gates", parse_feature_gates), ("runtime_config", parse_runtime_config)):
            try:
                entry[key].update(flag_map(given.get(key), parse))
            except FlagEditError as exc:
                raise exc.prefixed(f"{field}.{key}: ") from None
    return flags


SOURCES = ("feature_gates", "manifests_dir", "rancher_config_files", "kubelet_config", "current_flags")


def run(module: AnsibleModule) -> dict:
    p = module.params
    try:
        minor = supported_minor(p["version"])
    except CatalogError as exc:
        raise exc.prefixed("version: ") from None
    if not any(p[name] or p[name] == "" for name in SOURCES):
        raise GpusplitError(
            "nothing to check: give feature_gates (the gates about to be requested) and/or where the current "
            "flags are (manifests_dir, rancher_config_files, kubelet_config, current_flags)"
        )
    try:
        current = gather_current_flags(module)
    except GpusplitError as exc:
        raise exc.prefixed("cannot read the current control-plane flags: ") from None

    errors, warnings, runtime_config = validate_gates(
        minor, p["feature_gates"], allow_uncatalogued=p["allow_uncatalogued"]
    )
    findings = upgrade_preflight(current, minor, allow_uncatalogued=p["allow_uncatalogued"])
    stale: dict[str, list] = {}
    for finding in findings:
        if finding["severity"] == "error" and finding["kind"] in ("feature-gate", "uncatalogued"):
            stale.setdefault(finding["component"], []).append(finding["name"])
    migrated = {}
    for component, flags in current.items():
        try:
            migrated[component] = migrate_gates(flags["feature_gates"], minor)[0]
        except CatalogError as exc:
            errors.append(f"{component}: {exc}")

    result = {
        "changed": False,
        "minor": minor,
        "gate_errors": errors,
        "gate_warnings": warnings,
        "runtime_config": runtime_config,
        "current_flags": current,
        "findings": findings,
        "stale_gates": stale,
        "migrated_feature_gates": migrated,
    }
    blocking = errors + [f"{f['component']}: {f['message']}" for f in findings if f["severity"] == "error"]
    for warning in warnings:
        module.warn(warning)
    for finding in findings:
        if finding["severity"] == "warning":
            module.warn(f"{finding['component']}: {finding['message']}")
    if blocking and p["fail_on_error"]:
        module.fail_json(
            msg=f"feature-gate preflight for Kubernetes {minor} failed: " + "; ".join(blocking), **result
        )
    return result


def main():
    module = AnsibleModule(
        argument_spec=dict(
            version=dict(type="str", required=True),
            feature_gates=dict(type="dict", default={}),
            manifests_dir=dict(type="path"),
            rancher_config_files=dict(type="list", elements="path", default=[]),
            kubelet_config=dict(type="path"),
            current_flags=dict(type="dict", default={}),
            allow_uncatalogued=dict(type="bool", default=False),
            fail_on_error=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    run_module(module, run)


if __name__ == "__main__":
    main()
