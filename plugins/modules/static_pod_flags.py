#!/usr/bin/python
# Copyright: gpusplit contributors
# Apache License 2.0 (see galaxy.yml)
"""Ansible module gpusplit.k8s.static_pod_flags."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: static_pod_flags
short_description: Merge feature gates and runtime-config into a control-plane static-pod manifest
version_added: "0.1.0"
description:
  - Edits the C(command) of a kubeadm-style static-pod manifest (for example
    C(/etc/kubernetes/manifests/kube-apiserver.yaml)) and merges O(feature_gates) into
    C(--feature-gates) and O(runtime_config) into C(--runtime-config).
  - Inside a flag a gate of the same name is replaced in place, other gates are kept, new gates are
    appended sorted; a flag that does not exist yet is appended at the end of the command, where
    kubeadm puts C(extraArgs). Repeated flags are folded into the first one (the component merges
    them the same way).
  - Only the affected command lines change; every other byte of the file is kept. The edited text
    is read back and compared with the intended document before anything is written.
  - Idempotent. A re-run with the same options reports C(changed=false) and writes nothing.
  - The kubelet restarts the static pod when the file changes. A hand edit alone is lost at the next
    C(kubeadm upgrade), which regenerates the manifests from the C(kubeadm-config) ConfigMap; change
    that too (M(gpusplit.k8s.kubeadm_config_flags)).
  - The new file is written to a temporary file named C(.<name>.gpusplit-*) in the manifest directory
    and renamed over the manifest. The kubelet reads every file of that directory whose name does not
    start with a dot, whatever its extension (kubelet C(pkg/kubelet/config/file.go) globs C([^.]*),
    C(file_linux.go) ignores dot-file events), so a dot-file is the only safe temporary name there
    and the rename replaces the manifest atomically.
options:
  path:
    description: The static-pod manifest to edit.
    type: path
    required: true
  backup_dir:
    description:
      - Directory for a copy of the manifest as it was before the change. Required whenever the
        module changes the file (also checked in check mode).
      - It must not be the manifest directory or inside it, because the kubelet would run the copy
        as a second static pod. Where O(path) is a symbolic link, the manifest directory is the link's own
        directory (the one the kubelet reads), not its target's.
      - The copy is written through a temporary file, synced, with the manifest's mode and owner, and removed
        again when the manifest cannot be written. A refused O(backup_dir) changes nothing (C(changed=false)).
    type: path
  follow:
    description:
      - When O(path) is a symbolic link, write the file it points to (keeping that file's mode and owner).
      - By default a link is refused, so that no other file is changed through it.
    type: bool
    default: false
  validate_version:
    description:
      - Check the resulting gate list against the gpusplit catalog for this Kubernetes version before
        writing and fail on anything that would stop the component (unknown or removed gate, locked
        gate set to the other value, dependency left disabled). For kube-apiserver also check that
        C(--runtime-config) names only group/versions that release knows.
      - C(auto) takes the version from the manifest's image tag; a tag without a version, or a version
        the catalog does not cover, is refused (give the version, or turn the check off).
      - C(off) writes the gates unchecked and warns; a gate the running version does not know stops
        the component at start.
      - Not used with O(restore_from), which puts a backup back unchecked.
    type: str
    default: auto
  allow_uncatalogued:
    description: With O(validate_version) on, accept gate names outside the gpusplit catalog (as warnings).
    type: bool
    default: false
  container:
    description: Container whose command is edited; default the one named like the pod, else the first.
    type: str
  restore_from:
    description:
      - Put this file (a backup this module made, RV(backup_file)) back as the manifest instead of
        editing flags; the rollback of a component that did not come back healthy.
      - Written like an edit, through a dot-file in the manifest directory and an atomic rename, so
        that the kubelet never sees a partial file or a second manifest (a plain copy with
        C(remote_src) leaves a C(tmpXXXXXX) file there while it works).
      - The file must hold a static Pod of the same component as O(path), if O(path) exists.
        Not together with O(feature_gates), O(runtime_config), O(remove_feature_gates),
        O(remove_runtime_config) or a version in O(validate_version).
    type: path
requirements:
  - PyYAML (python3-yaml) on the managed host
extends_documentation_fragment:
  - gpusplit.k8s.gate_edits
  - gpusplit.k8s.attributes.check_mode_and_diff
author:
  - gpusplit contributors (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Enable gang scheduling on kube-apiserver (Kubernetes 1.37)
  gpusplit.k8s.static_pod_flags:
    path: /etc/kubernetes/manifests/kube-apiserver.yaml
    feature_gates:
      GenericWorkload: true
    runtime_config:
      scheduling.k8s.io/v1beta1: "true"
    backup_dir: /var/backups/gpusplit/manifests

- name: Drop gates that Kubernetes 1.37 removed, before the upgrade
  gpusplit.k8s.static_pod_flags:
    path: /etc/kubernetes/manifests/kube-scheduler.yaml
    feature_gates:
      GenericWorkload: true
    remove_feature_gates: [GangScheduling, WorkloadAwarePreemption]
    backup_dir: /var/backups/gpusplit/manifests
    validate_version: "1.37"

- name: Enable a gate, and put the previous manifest back if kube-apiserver does not come back
  block:
    - name: Merge the gate
      gpusplit.k8s.static_pod_flags:
        path: /etc/kubernetes/manifests/kube-apiserver.yaml
        feature_gates:
          GenericWorkload: true
        backup_dir: /var/backups/gpusplit/manifests
      register: edit
    - name: Wait for kube-apiserver
      ansible.builtin.uri:
        url: https://127.0.0.1:6443/readyz
        validate_certs: false
      register: ready
      retries: 30
      delay: 5
      until: ready.status == 200
  rescue:
    - name: Put the previous manifest back
      gpusplit.k8s.static_pod_flags:
        path: /etc/kubernetes/manifests/kube-apiserver.yaml
        restore_from: "{{ edit.backup_file }}"
      when: edit.backup_file is defined
"""

RETURN = r"""
path:
  description: The manifest.
  returned: always
  type: str
component:
  description: The component the manifest runs (first word of the command).
  type: str
  returned: always
  sample: kube-apiserver
version:
  description: Kubernetes version read from the image tag, if any.
  type: str
  returned: always
  sample: 1.37.2
backup_file:
  description: Where the previous manifest was copied (not set in check mode or when nothing changed).
  type: str
  returned: changed and not check mode
restored_from:
  description: With O(restore_from), the file put back.
  type: str
  returned: when restore_from is set
previous_feature_gates:
  description: C(--feature-gates) before, as a map.
  type: dict
  returned: always
feature_gates:
  description: C(--feature-gates) after, as a map.
  type: dict
  returned: always
  sample: {GenericWorkload: true}
previous_runtime_config:
  description: C(--runtime-config) before, as a map.
  type: dict
  returned: always
runtime_config:
  description: C(--runtime-config) after, as a map.
  type: dict
  returned: always
  sample: {scheduling.k8s.io/v1beta1: "true"}
needed_runtime_config:
  description:
    - The C(--runtime-config) entries the resulting gates need on kube-apiserver.
  type: dict
  returned: when validate_version is not off
validation_warnings:
  description: Warnings from the catalog check (GA or alpha gates, uncatalogued names).
  type: list
  elements: str
  returned: when validate_version is not off
validated_version:
  description: The Kubernetes minor the result was checked against; null with O(validate_version=off).
  type: str
  returned: when not restoring
  sample: "1.37"
"""

import os
import stat

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpusplit.k8s.plugins.module_utils._control_plane.components import APISERVER
from ansible_collections.gpusplit.k8s.plugins.module_utils._control_plane.flag_values import (
    GATE_EDIT_ARGS,
    FlagEditError,
    gate_edits_given,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._control_plane.gate_preflight import (
    VALIDATE_OFF,
    validate_flag_sets,
    validation_minor,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._control_plane.module_io import (
    backing_up,
    run_module,
    warn_unchecked,
    writing,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._control_plane.static_pod import (
    edit_static_pod_manifest,
    parse_static_pod,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError, fail_on_refusal
from ansible_collections.gpusplit.k8s.plugins.module_utils._host.files import (
    backup_copy,
    check_link,
    file_diff,
    is_inside,
    own_directory,
    read_text,
    write_atomic,
)


def check_backup_dir(backup_dir: str | None, manifest: str) -> str | None:
    """An error message when ``backup_dir`` is unusable for ``manifest``, else None."""
    if not backup_dir:
        return "backup_dir is required when the manifest changes"
    manifest_dir = own_directory(manifest)  # a link's own directory: the one the kubelet reads
    if is_inside(backup_dir, manifest_dir):
        return (
            f"backup_dir {backup_dir} is the manifest directory {manifest_dir} or inside it; the kubelet "
            "runs every file there as a static pod, so a backup there would start a second "
            f"{os.path.basename(manifest)} pod"
        )
    return None


def restore(module: AnsibleModule) -> dict:
    """Put ``restore_from`` back as the manifest ``path``, through a dot-file and a rename."""
    p = module.params
    path, source = p["path"], p["restore_from"]
    explicit = str(p["validate_version"] or "auto").strip().lower() not in ("auto",) + VALIDATE_OFF
    clashing = gate_edits_given(p) + (["validate_version"] if explicit else [])
    if clashing:
        module.fail_json(msg=f"restore_from puts a whole manifest back; drop {', '.join(clashing)}")
    if not os.path.isfile(source):
        module.fail_json(msg=f"restore_from {source} does not exist or is not a file; nothing was changed")
    if is_inside(source, own_directory(path)) and os.path.realpath(source) != os.path.realpath(path):
        module.fail_json(
            msg=f"restore_from {source} lies in the manifest directory of {path}, where the kubelet runs it "
            "as a static pod of its own; a backup belongs outside it (backup_dir)"
        )
    with fail_on_refusal(module):
        text = read_text(source, f"restore_from {source}")
        try:
            wanted = parse_static_pod(text, p["container"])
        except FlagEditError as exc:
            raise exc.prefixed(
                f"restore_from {source} is no static-pod manifest (", "); nothing was changed"
            ) from None
        exists = os.path.isfile(path)
        before_text = read_text(path) if exists else ""
    if exists:
        try:
            current = parse_static_pod(before_text, p["container"])["component"]
        except FlagEditError:
            current = None  # a broken manifest is what a rollback repairs
        if current and current != wanted["component"]:
            module.fail_json(
                msg=f"restore_from {source} runs {wanted['component']} but {path} runs {current}; "
                "refusing to put one component's manifest over another's"
            )
    result = {
        "changed": text != before_text,
        "path": path,
        "restored_from": source,
        "component": wanted["component"],
        "version": wanted["version"],
        "feature_gates": wanted["feature_gates"],
        "runtime_config": wanted["runtime_config"],
    }
    if exists and before_text:
        try:
            before = parse_static_pod(before_text, p["container"])
            result["previous_feature_gates"] = before["feature_gates"]
            result["previous_runtime_config"] = before["runtime_config"]
        except FlagEditError:
            pass
    result.setdefault("previous_feature_gates", {})
    result.setdefault("previous_runtime_config", {})
    if module._diff:
        result["diff"] = file_diff(before_text, text, path)
    if result["changed"] and not module.check_mode:
        # a new file gets the backup's mode, which kept the manifest's (0600 from kubeadm)
        with fail_on_refusal(module, **{**result, "changed": False}), writing(path):
            write_atomic(
                module,
                path,
                text,
                new_file=not exists,
                mode=stat.S_IMODE(os.stat(source).st_mode),
                follow=p["follow"],
            )
    return result


def run(module: AnsibleModule) -> dict:
    p = module.params
    if p["restore_from"]:
        return restore(module)
    path = p["path"]
    if not os.path.isfile(path):
        module.fail_json(msg=f"manifest {path} does not exist")
    with fail_on_refusal(module):
        before_text = read_text(path)
        try:
            edit = edit_static_pod_manifest(
                before_text,
                p["feature_gates"],
                p["runtime_config"],
                p["remove_feature_gates"],
                p["remove_runtime_config"],
                container=p["container"],
            )
        except FlagEditError as exc:
            raise exc.prefixed(f"{path}: ") from None

    if edit["component"] != APISERVER and edit["after"]["runtime_config"]:
        module.fail_json(
            msg=f"{path}: {edit['component']} has no --runtime-config flag (kube-apiserver only) and would exit "
            "with 'unknown flag: --runtime-config'"
        )

    result = {
        "changed": edit["changed"],
        "path": path,
        "component": edit["component"],
        "version": edit["version"],
        "previous_feature_gates": edit["before"]["feature_gates"],
        "feature_gates": edit["after"]["feature_gates"],
        "previous_runtime_config": edit["before"]["runtime_config"],
        "runtime_config": edit["after"]["runtime_config"],
    }

    with fail_on_refusal(module, **result):
        try:
            minor = validation_minor(
                p["validate_version"], edit["version"], f"the image tag {edit['image'] or '(none)'!r}"
            )
        except GpusplitError as exc:
            raise exc.prefixed(f"{path}: ") from None
    result["validated_version"] = minor
    if minor is None:
        warn_unchecked(module, path, edit["component"])
    else:
        errors, warnings, needed = validate_flag_sets(
            minor, {edit["component"]: edit["after"]}, allow_uncatalogued=p["allow_uncatalogued"]
        )
        result["needed_runtime_config"] = needed
        result["validation_warnings"] = warnings
        for warning in warnings:
            module.warn(warning)
        if errors:
            module.fail_json(
                msg=f"{path}: refusing a flag set that would stop {edit['component']} {minor}: "
                + "; ".join(errors),
                errors=errors,
                **result,
            )

    if module._diff:
        result["diff"] = file_diff(before_text, edit["text"], path)
    if not edit["changed"]:
        return result

    unchanged = {**result, "changed": False}  # what a refusal from here on reports: nothing was written
    problem = check_backup_dir(p["backup_dir"], path)
    if problem:
        module.fail_json(msg=problem, **unchanged)
    with fail_on_refusal(module, **unchanged):
        if not p["follow"]:
            check_link(path)
    if module.check_mode:
        return result

    with fail_on_refusal(module, **unchanged):
        with backing_up(path, p["backup_dir"]):
            backup = backup_copy(path, p["backup_dir"])
        try:
            with writing(path):
                write_atomic(module, path, edit["text"], follow=p["follow"])
        except BaseException:
            os.unlink(backup)  # no backup stands for a change that did not happen
            raise
        result["backup_file"] = backup
    return result


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            **GATE_EDIT_ARGS,
            backup_dir=dict(type="path"),
            validate_version=dict(type="str", default="auto"),
            allow_uncatalogued=dict(type="bool", default=False),
            container=dict(type="str"),
            restore_from=dict(type="path"),
            follow=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    run_module(module, run)


if __name__ == "__main__":
    main()
