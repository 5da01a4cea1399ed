#!/usr/bin/python
# Copyright: gpusplit contributors
# Apache License 2.0 (see galaxy.yml)
"""Ansible module gpusplit.k8s.rancher_config_dropin."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: rancher_config_dropin
short_description: Merge feature gates into gpusplit's k3s/rke2 config.yaml.d drop-in, or put it back
version_added: "0.1.0"
description:
  - Keeps the control-plane feature gates of a k3s or rke2 server in one drop-in,
    C(<config_dir>/config.yaml.d/<name>), as C(kube-apiserver-arg+), C(kube-scheduler-arg+) and
    C(kube-controller-manager-arg+) entries (C(feature-gates=...), and C(runtime-config=...) for
    kube-apiserver).
  - O(feature_gates) and O(runtime_config) are merged into what the drop-in already holds. A gate of
    the same name is replaced, the other gates stay (so gates written by an earlier run with other
    gates are kept), new names are appended sorted. Other args in the drop-in's lists are kept; any
    other key in the drop-in is refused, because the file is rewritten.
  - Before writing, the module reads C(config.yaml) and every C(config.yaml.d/*.yaml|*.yml) file the
    way k3s does (C(config.yaml) first, then the drop-ins by name; a key ending in C(+) appends, a
    plain key replaces the earlier list; repeated C(--feature-gates) are merged by the component,
    the later value winning) and fails, naming the file, when a file read after the drop-in would
    undo a requested gate or runtime-config entry. Nothing is written then.
  - The file is written through a dot-file beside it and an atomic rename (k3s reads only names
    ending in C(.yaml) or C(.yml) there). Idempotent; check mode and diff.
  - The service is not restarted here; the M(gpusplit.k8s.control_plane_health) module checks the
    components afterwards (role C(gpusplit.k8s.control_plane_gates) does both).
  - O(restore_from) puts a backup back and O(state=absent) removes the drop-in (the two rollbacks).
options:
  config_dir:
    description: The k3s or rke2 configuration directory (C(/etc/rancher/k3s), C(/etc/rancher/rke2)).
    type: path
    required: true
  name:
    description: File name of the drop-in in C(config.yaml.d). It must end in C(.yaml) or C(.yml).
    type: str
    default: 50-gpusplit-feature-gates.yaml
  state:
    description:
      - C(present) merges the flags in (or, with O(restore_from), puts that file back).
      - C(absent) removes the drop-in (the rollback when there was none before).
    type: str
    choices: [present, absent]
    default: present
  header:
    description: Comment written at the top of the drop-in (one C(#) line per line).
    type: str
  backup_dir:
    description:
      - Directory for a copy of the drop-in as it was before a merge changes it (when there was one).
        Required then; not C(config.yaml.d) or inside it. A restore or a removal (the rollbacks of
        a merge) makes no copy.
    type: path
  restore_from:
    description:
      - Put this file (RV(backup_file) of an earlier run) back as the drop-in, unchanged. It must be a
        YAML map holding only control-plane arg keys. Not together with O(feature_gates),
        O(runtime_config), O(remove_feature_gates) or O(remove_runtime_config).
    type: path
  validate_version:
    description:
      - Check the flags every component gets once the drop-in is merged (C(config.yaml) and all
        drop-ins together) against the gpusplit catalog for this Kubernetes version, and fail before
        writing anything that would stop a component (unknown or removed gate, locked gate set to the
        other value, dependency left disabled, a C(--runtime-config) group/version that release does
        not know).
      - C(auto) asks the server binary, C(k3s --version) or C(rke2 --version) (after the name of
        O(config_dir); both are tried for another name); no binary, no version in its output, or a
        version the catalog does not cover is refused (give the version, or turn the check off).
      - C(off) writes the gates unchecked and warns.
      - Not used by the rollbacks (O(restore_from), O(state=absent)).
    type: str
    default: auto
  allow_uncatalogued:
    description: With O(validate_version) on, accept gate names outside the gpusplit catalog (as warnings).
    type: bool
    default: false
requirements:
  - PyYAML (python3-yaml) on the managed host
extends_documentation_fragment:
  - gpusplit.k8s.gate_edits
  - gpusplit.k8s.attributes.check_mode_and_diff
author:
  - gpusplit contributors (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Enable gang scheduling on a k3s server (restart k3s afterwards)
  gpusplit.k8s.rancher_config_dropin:
    config_dir: /etc/rancher/k3s
    feature_gates:
      GenericWorkload: true
    runtime_config:
      scheduling.k8s.io/v1beta1: "true"
    backup_dir: /var/lib/gpusplit/backups
    validate_version: "1.37.2"  # or auto: asks k3s --version
  register: dropin

- name: Put the previous drop-in back
  gpusplit.k8s.rancher_config_dropin:
    config_dir: /etc/rancher/k3s
    restore_from: "{{ dropin.backup_file }}"
  when: dropin.backup_file is defined

- name: Remove the drop-in that was new
  gpusplit.k8s.rancher_config_dropin:
    config_dir: /etc/rancher/k3s
    state: absent
  when: not dropin.existed
"""

RETURN = r"""
path:
  description: The drop-in.
  type: str
  returned: always
  sample: /etc/rancher/k3s/config.yaml.d/50-gpusplit-feature-gates.yaml
existed:
  description: Whether the drop-in existed before this run.
  type: bool
  returned: always
backup_file:
  description: Where the previous drop-in was copied (only when one existed and changed; not in check mode).
  type: str
  returned: changed, the drop-in existed, not check mode
restored_from:
  description: With O(restore_from), the file put back.
  type: str
  returned: when restore_from is set
previous_flags:
  description: Per component, C(feature_gates) and C(runtime_config) in the drop-in before.
  type: dict
  returned: always
flags:
  description: Per component, C(feature_gates) and C(runtime_config) in the drop-in after.
  type: dict
  returned: always
  sample: {kube-apiserver: {feature_gates: {GenericWorkload: true}}}
validated_version:
  description:
    - The Kubernetes minor the merged flags were checked against; null with O(validate_version=off)
      and in the rollbacks.
  type: str
  returned: always
  sample: "1.37"
validation_warnings:
  description: Warnings from the catalog check (GA or alpha gates, uncatalogued names).
  type: list
  elements: str
  returned: when the flags were checked
effective_flags:
  description:
    - Per component, the C(feature_gates) and C(runtime_config) it gets from C(config.yaml) and all
      drop-ins together once the change is made (what a restart will run it with).
  type: dict
  returned: always
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpusplit.k8s.plugins.module_utils._control_plane.flag_values import (
    GATE_EDIT_ARGS,
    FlagEditError,
    gate_edits_given,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._control_plane.gate_preflight import (
    validate_flag_sets,
    validation_minor,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._control_plane.module_io import (
    backing_up,
    make_dirs,
    remove_file,
    run_module,
    warn_unchecked,
    writing,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._control_plane.rancher import (
    merge_rancher_dropin,
    parse_rancher_dropin,
    rancher_component_flags,
    rancher_dropin_problems,
    rancher_read_order,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError, fail_on_refusal
from ansible_collections.gpusplit.k8s.plugins.module_utils._host.files import (
    backup_copy,
    file_diff,
    is_inside,
    read_text,
    write_atomic,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.versions import version_from_version_output

_SUFFIXES = (".yaml", ".yml")


def config_files(config_dir: str) -> list[tuple[str, str]]:
    """``(name, text)`` of config.yaml (when it exists) and the config.yaml.d files k3s reads."""
    files = []
    main = os.path.join(config_dir, "config.yaml")
    if os.path.isfile(main):
        files.append(("config.yaml", read_text(main)))
    dropins = os.path.join(config_dir, "config.yaml.d")
    if os.path.isdir(dropins):
        for entry in sorted(os.listdir(dropins)):
            full = os.path.join(dropins, entry)
            if entry.lower().endswith(_SUFFIXES) and os.path.isfile(full):
                files.append((f"config.yaml.d/{entry}", read_text(full)))
    return rancher_read_order(files)


def _flags_of(text: str, what: str) -> dict:
    return {
        c: {"feature_gates": v["feature_gates"], "runtime_config": v["runtime_config"]}
        for c, v in parse_rancher_dropin(text, what).items()
    }


def _backup(module, path: str, backup_dir: str | None, dropin_dir: str) -> str:
    if not backup_dir:
        module.fail_json(
            msg=f"backup_dir is required to change or remove the existing drop-in {path}", changed=False
        )
    if is_inside(backup_dir, dropin_dir):
        module.fail_json(
            msg=f"backup_dir {backup_dir} is {dropin_dir} or inside it; k3s/rke2 read the files there",
            changed=False,
        )
    if module.check_mode:
        return ""
    with backing_up(path, backup_dir):
        return backup_copy(path, backup_dir)


def _write(module, path: str, text: str, existed: bool) -> None:
    if module.check_mode:
        return
    make_dirs(os.path.dirname(path))
    with writing(path):
        write_atomic(module, path, text, new_file=not existed, mode=0o600, option=None)


def server_version(module, config_dir: str) -> tuple[str | None, str]:
    """``(version, where)``: what ``k3s --version`` / ``rke2 --version`` says, for validate_version=auto.

    The binary is named after ``config_dir`` (``/etc/rancher/k3s`` -> k3s); for another name both
    are tried. No binary, a failing one or output without a version is a refusal naming it.
    """
    base = os.path.basename(os.path.normpath(config_dir))
    names = [base] if base in ("k3s", "rke2") else ["k3s", "rke2"]
    for name in names:
        binary = module.get_bin_path(name, opt_dirs=["/usr/local/bin", "/opt/rke2/bin"])
        if not binary:
            continue
        rc, out, err = module.run_command([binary, "--version"])
        where = f"the output of {binary} --version"
        if rc != 0:
            raise GpusplitError(
                f"validate_version=auto: {binary} --version failed (exit {rc}: {' '.join((err or out).split())[:200]}); "
                "give validate_version (e.g. 1.37.2), or validate_version=off to write the gates unchecked"
            )
        return version_from_version_output(out), where
    raise GpusplitError(
        f"validate_version=auto asks {' or '.join(names)} --version for the Kubernetes version, but no such "
        "binary is on this host's PATH; give validate_version (e.g. 1.37.2), or validate_version=off to "
        "write the gates unchecked"
    )


def run(module: AnsibleModule) -> dict:
    p = module.params
    name = p["name"]
    if "/" in name or not name.lower().endswith(_SUFFIXES):
        module.fail_json(
            msg=f"name {name!r} must be a file name ending in .yaml or .yml, or k3s/rke2 never read it"
        )
    dropin_dir = os.path.join(p["config_dir"], "config.yaml.d")
    path = os.path.join(dropin_dir, name)
    rel = f"config.yaml.d/{name}"
    existed = os.path.isfile(path)
    editing = gate_edits_given(p)
    if p["restore_from"] and editing:
        module.fail_json(msg=f"restore_from puts a whole drop-in back; drop {', '.join(editing)}")
    if p["state"] == "absent" and (editing or p["restore_from"]):
        module.fail_json(
            msg="state=absent removes the drop-in; drop " + ", ".join(editing or ["restore_from"])
        )

    with fail_on_refusal(module):
        before_text = read_text(path) if existed else ""
        try:
            previous = _flags_of(before_text, path) if existed else {}
        except FlagEditError as exc:
            if p["state"] == "present" and not p["restore_from"]:
                raise exc.prefixed(f"{path}: ") from None
            previous = {}  # a broken drop-in is what a rollback repairs
    result = {"path": path, "existed": existed, "previous_flags": previous}

    with fail_on_refusal(module, **result):
        others = [f for f in config_files(p["config_dir"]) if f[0] != rel]
    if p["state"] == "absent":
        after_text = None
        result["flags"] = {}
    elif p["restore_from"]:
        source = p["restore_from"]
        if not os.path.isfile(source):
            module.fail_json(
                msg=f"restore_from {source} does not exist or is not a file; nothing was changed"
            )
        result["restored_from"] = source
        with fail_on_refusal(module, **result):
            after_text = read_text(source, f"restore_from {source}")
            result["flags"] = _flags_of(after_text, f"restore_from {source}")
    else:
        with fail_on_refusal(module, **result):
            merged = merge_rancher_dropin(
                before_text if existed else None,
                p["feature_gates"],
                p["runtime_config"],
                remove_feature_gates=p["remove_feature_gates"],
                remove_runtime_config=p["remove_runtime_config"],
                header=p["header"],
                what=path,
            )
        after_text = merged["text"]
        result["flags"] = merged["after"]
        with fail_on_refusal(module, **result):
            problems = rancher_dropin_problems(
                others, rel, after_text, p["feature_gates"], p["runtime_config"]
            )
        if problems:
            module.fail_json(
                msg=f"{path} would not take effect, nothing was written: " + "; ".join(problems),
                problems=problems,
                **result,
            )
    ordered = rancher_read_order(others + ([(rel, after_text)] if after_text is not None else []))
    with fail_on_refusal(module, **result):
        result["effective_flags"] = rancher_component_flags(
            [t for _n, t in ordered], [n for n, _t in ordered]
        )
    result["validated_version"] = None
    if p["state"] == "present" and not p["restore_from"]:
        with fail_on_refusal(module, **result):
            text = str(p["validate_version"] or "auto").strip().lower()
            found, where = server_version(module, p["config_dir"]) if text == "auto" else (None, "")
            minor = validation_minor(p["validate_version"], found, where)
        result["validated_version"] = minor
        if minor is None:
            warn_unchecked(module, path, "the k3s/rke2 server")
        else:
            errors, warnings, _needed = validate_flag_sets(
                minor, result["effective_flags"], allow_uncatalogued=p["allow_uncatalogued"]
            )
            result["validation_warnings"] = warnings
            for warning in warnings:
                module.warn(warning)
            if errors:
                module.fail_json(
                    msg=f"{path}: refusing flags that would stop the k3s/rke2 server ({minor}), nothing was "
                    "written: " + "; ".join(errors),
                    errors=errors,
                    **result,
                )

    if after_text is None:
        result["changed"] = existed
    else:
        result["changed"] = not existed or after_text != before_text
    if module._diff:
        result["diff"] = file_diff(
            before_text,
            after_text or "",
            path if existed else "(absent)",
            path if after_text is not None else "(absent)",
        )
    if not result["changed"]:
        return result

    # a restore or a removal is a rollback of this module's own write: no second backup of it
    if existed and not p["restore_from"] and p["state"] == "present":
        backup = _backup(module, path, p["backup_dir"], dropin_dir)
        if backup:
            result["backup_file"] = backup
    if module.check_mode:
        return result
    if after_text is None:
        remove_file(path)
    else:
        try:
            _write(module, path, after_text, existed)
        except BaseException:
            if result.get("backup_file"):
                os.unlink(result.pop("backup_file"))  # no backup stands for a change that did not happen
            raise
    return result


def main():
    module = AnsibleModule(
        argument_spec=dict(
            config_dir=dict(type="path", required=True),
            name=dict(type="str", default="50-gpusplit-feature-gates.yaml"),
            state=dict(type="str", choices=["present", "absent"], default="present"),
            **GATE_EDIT_ARGS,
            header=dict(type="str"),
            backup_dir=dict(type="path"),
            restore_from=dict(type="path"),
            validate_version=dict(type="str", default="auto"),
            allow_uncatalogued=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    run_module(module, run)


if __name__ == "__main__":
    main()
