#!/usr/bin/python
# Copyright: gpusplit contributors
# Apache License 2.0 (see galaxy.yml)
"""Ansible module gpusplit.k8s.kubeadm_config_flags."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: kubeadm_config_flags
short_description: Merge feature gates and runtime-config into a kubeadm ClusterConfiguration
version_added: "0.1.0"
description:
  - C(kubeadm upgrade) regenerates the control-plane static pods from the C(ClusterConfiguration) in
    ConfigMap C(kube-system/kubeadm-config), so a gate set only in the manifests is lost at the next
    upgrade. This module applies the same merge as M(gpusplit.k8s.static_pod_flags) to the
    C(extraArgs) of C(apiServer), C(scheduler) and C(controllerManager).
  - Handles C(kubeadm.k8s.io/v1beta4) (C(extraArgs) is a list of C(name)/C(value) items) and
    C(kubeadm.k8s.io/v1beta3) (C(extraArgs) is a map). kubeadm 1.37 no longer reads v1beta3 files,
    but an older cluster's ConfigMap may still hold it.
  - Works on text. With O(content) (for example the ConfigMap's C(data.ClusterConfiguration), read with
    C(kubernetes.core.k8s_info)) it only returns the new text for the caller to apply. With O(path)
    (a kubeadm config file) it also writes the file.
  - Only the affected lines change; the result is read back and compared with the intended document.
    Idempotent.
options:
  content:
    description: ClusterConfiguration text (one document) or a whole kubeadm config file's text.
    type: str
  path:
    description: A kubeadm config file to edit in place. Mutually exclusive with O(content).
    type: path
  components:
    description: Sections to change.
    type: list
    elements: str
    choices: [apiServer, scheduler, controllerManager]
    default: [apiServer, scheduler, controllerManager]
  validate_version:
    description:
      - Check each section's resulting gates against the gpusplit catalog for this Kubernetes version
        and fail before returning or writing anything that would stop a component.
      - C(auto) reads C(kubernetesVersion) from the ClusterConfiguration; none there, a label such as
        C(stable-1), or a version the catalog does not cover is refused (give the version, or turn the
        check off).
      - C(off) returns or writes the gates unchecked and warns.
    type: str
    default: auto
  allow_uncatalogued:
    description: With O(validate_version) on, accept gate names outside the gpusplit catalog (as warnings).
    type: bool
    default: false
  backup:
    description:
      - With O(path), keep a copy of the file next to it, C(<path>.gpusplit-<UTC timestamp>.bak), before writing
        (through a temporary file, synced, with the file's mode and owner); it is removed again when the write
        is refused.
      - O(path) must not be a symbolic link then (nothing is written through a link to another file).
    type: bool
    default: false
requirements:
  - PyYAML (python3-yaml) on the host the module runs on
extends_documentation_fragment:
  - gpusplit.k8s.gate_edits
  - gpusplit.k8s.attributes.check_mode_and_diff
author:
  - gpusplit contributors (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Read the kubeadm-config ConfigMap
  kubernetes.core.k8s_info:
    kind: ConfigMap
    namespace: kube-system
    name: kubeadm-config
  register: kubeadm_config
  delegate_to: localhost
  run_once: true

- name: Compute the new ClusterConfiguration
  gpusplit.k8s.kubeadm_config_flags:
    content: "{{ kubeadm_config.resources[0].data.ClusterConfiguration }}"
    feature_gates:
      GenericWorkload: true
    runtime_config:
      scheduling.k8s.io/v1beta1: "true"
    validate_version: auto
  register: cluster_config
  delegate_to: localhost
  run_once: true

- name: Store it
  kubernetes.core.k8s:
    state: patched
    kind: ConfigMap
    namespace: kube-system
    name: kubeadm-config
    definition:
      data:
        ClusterConfiguration: "{{ cluster_config.content }}"
  when: cluster_config.changed
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
content:
  description: The resulting text (unchanged text when nothing changed).
  type: str
  returned: always
api_version:
  description: The ClusterConfiguration's kubeadm API version.
  type: str
  returned: always
  sample: v1beta4
sections:
  description: Per section, the gates and runtime-config before and after.
  type: dict
  returned: always
  sample:
    apiServer:
      before: {feature_gates: {}, runtime_config: {}}
      after: {feature_gates: {GenericWorkload: true}, runtime_config: {scheduling.k8s.io/v1beta1: "true"}}
validated_version:
  description: The Kubernetes minor the result was checked against; null with O(validate_version=off).
  type: str
  returned: always
  sample: "1.37"
backup_file:
  description: The copy made with O(backup).
  type: str
  returned: when a backup was made
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpusplit.k8s.plugins.module_utils._control_plane.flag_values import (
    GATE_EDIT_ARGS,
    FlagEditError,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._control_plane.gate_preflight import (
    validate_flag_sets,
    validation_minor,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._control_plane.kubeadm import (
    load_cluster_config,
    merge_cluster_config_flags,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._control_plane.module_io import (
    run_module,
    warn_unchecked,
    writing,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError, fail_on_refusal
from ansible_collections.gpusplit.k8s.plugins.module_utils._host.files import read_text, write_with_backup


def _merge(p: dict, text: str):
    """``(new text, {component: {before, after}}, the new ClusterConfiguration as data)``."""
    new_text = text
    sections = {}
    for component in p["components"]:
        is_api = component == "apiServer"
        edit = merge_cluster_config_flags(
            new_text,
            component,
            p["feature_gates"],
            p["runtime_config"] if is_api else None,
            p["remove_feature_gates"],
            p["remove_runtime_config"] if is_api else (),
        )
        new_text = edit["text"]
        sections[component] = {"before": edit["before"], "after": edit["after"]}
    return new_text, sections, load_cluster_config(new_text)


def run(module: AnsibleModule) -> dict:
    p = module.params
    path = p["path"]
    if path and not os.path.isfile(path):
        module.fail_json(msg=f"{path} does not exist")
    what = path or "content"
    if not path and not (p["content"] or "").strip():
        raise GpusplitError(
            "content is empty: give the ClusterConfiguration text (data.ClusterConfiguration of the "
            "kube-system/kubeadm-config ConfigMap) or a kubeadm config file in path"
        )
    with fail_on_refusal(module):
        text = read_text(path) if path else p["content"]
        try:
            new_text, sections, config = _merge(p, text)
        except FlagEditError as exc:
            raise exc.prefixed(f"{what}: ") from None
    result = {
        "changed": new_text != text,
        "content": new_text,
        "api_version": str(config.get("apiVersion", "")).rsplit("/", 1)[-1],
        "sections": sections,
    }
    with fail_on_refusal(module, **result):
        found = config.get("kubernetesVersion")
        try:
            minor = validation_minor(
                p["validate_version"],
                None if found is None else str(found),
                "the ClusterConfiguration's kubernetesVersion",
            )
        except GpusplitError as exc:
            raise exc.prefixed(f"{what}: ") from None
    result["validated_version"] = minor
    if minor is None:
        warn_unchecked(module, what, "the control-plane components")
    else:
        errors, warnings, _needed = validate_flag_sets(
            minor,
            {component: section["after"] for component, section in sections.items()},
            allow_uncatalogued=p["allow_uncatalogued"],
            apiserver="apiServer",
        )
        for warning in warnings:
            module.warn(warning)
        if errors:
            module.fail_json(
                msg=f"{what}: refusing a ClusterConfiguration that would stop the control plane "
                f"({minor}): " + "; ".join(errors),
                errors=errors,
                **result,
            )
    if module._diff:
        result["diff"] = {"before": text, "after": new_text}
    if result["changed"] and path and not module.check_mode:
        with fail_on_refusal(module, **{**result, "changed": False}), writing(path):
            backup = write_with_backup(module, path, new_text, "beside" if p["backup"] else None, option=None)
        if backup:
            result["backup_file"] = backup
    return result


def main():
    module = AnsibleModule(
        argument_spec=dict(
            content=dict(type="str"),
            path=dict(type="path"),
            components=dict(
                type="list",
                elements="str",
                choices=["apiServer", "scheduler", "controllerManager"],
                default=["apiServer", "scheduler", "controllerManager"],
            ),
            **GATE_EDIT_ARGS,
            validate_version=dict(type="str", default="auto"),
            allow_uncatalogued=dict(type="bool", default=False),
            backup=dict(type="bool", default=False),
        ),
        mutually_exclusive=[("content", "path")],
        required_one_of=[("content", "path")],
        supports_check_mode=True,
    )
    run_module(module, run)


if __name__ == "__main__":
    main()
