#!/usr/bin/python
# Copyright: gpusplit contributors
# Apache-2.0
"""Ansible module gpusplit.k8s.gpu_host_undo: take gpusplit's host files back off a host in one call."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_host_undo
short_description: Take gpusplit's host files back off a host (toolkit keys or backup, env file, drop-ins, record)
version_added: "0.2.0"
description:
  - The host side of C(playbooks/unsplit.yml) in one module execution (docs/undo.md).
  - O(host_files=restore) puts the NVIDIA Container Toolkit's C(config.toml) back from the backup gpusplit made
    before its first edit, while the file is still what gpusplit wrote (its SHA-256 is the one in gpusplit's
    record, O(state_path)); otherwise only gpusplit's keys (O(toolkit_keys)) are put back to the original's
    values, or the toolkit's defaults where the original did not set them, and RV(files) says which and why.
  - O(host_files=remove) only puts gpusplit's keys back that way; O(host_files=keep) leaves the toolkit's hardening
    and gpusplit's record in place.
  - Removes the env file and every drop-in named O(dropin_name) below O(dropin_dir) that carries O(dropin_marker),
    then (but with O(host_files=keep)) the record; folders gpusplit used are removed when left empty. gpusplit's
    backups stay.
  - Everything is read and decided before anything is written. A second run changes nothing.
author:
  - gpusplit team (!UNKNOWN)
options:
  host_files:
    description: What happens to the toolkit's hardening.
    type: str
    choices: [restore, remove, keep]
    default: restore
  state_path:
    description: gpusplit's record on the host (C(host-state.json) beside the env file).
    type: path
    required: true
  toolkit_path:
    description: The toolkit's configuration file. Leave out to leave the toolkit alone.
    type: path
  toolkit_keys:
    description: The keys gpusplit set in O(toolkit_path).
    type: list
    elements: str
    default: [accept-nvidia-visible-devices-as-volume-mounts, accept-nvidia-visible-devices-envvar-when-unprivileged]
  env_path:
    description: gpusplit's env file, removed.
    type: path
  dropin_dir:
    description: The systemd folder whose C(<unit>.d/) folders hold gpusplit's drop-ins.
    type: path
  dropin_name:
    description: The drop-in's file name.
    type: str
    default: 50-gpusplit.conf
  dropin_marker:
    description: Only a file with a line that starts with this text is removed.
    type: str
  daemon_reload:
    description: Run C(systemctl daemon-reload) once after a drop-in was removed (never in check mode).
    type: bool
    default: false
notes:
  - Supports check mode and diff mode.
  - Runs on the Pythons that the controller's ansible-core supports on managed hosts, with the standard library
    only.
extends_documentation_fragment:
  - gpusplit.k8s.attributes.check_mode_and_diff
"""

EXAMPLES = r"""
- name: Put a host's files back as they were before gpusplit
  gpusplit.k8s.gpu_host_undo:
    host_files: restore
    state_path: /etc/gpusplit/host-state.json
    toolkit_path: /etc/nvidia-container-runtime/config.toml
    env_path: /etc/gpusplit/host-gpus.env
    dropin_dir: /etc/systemd/system
    dropin_marker: "# Managed by gpusplit (gpusplit.k8s.gpu_host)."
    daemon_reload: true
"""

RETURN = r"""
files:
  description:
    - One entry per file the module changes or looked at, with C(kind) (V(toolkit), V(env), V(dropin), V(record)),
      C(path), C(action) (V(none), V(restore), V(keys), V(keep), V(remove)), C(changed); C(note) (why), C(keys),
      C(backup) for the toolkit; C(unit) for drop-ins; C(diff) in diff mode.
  returned: always
  type: list
  elements: dict
toolkit:
  description: The toolkit's file, C(path) and C(missing). Null without O(toolkit_path).
  returned: always
  type: dict
host_files:
  description: The mode it ran with.
  returned: always
  type: str
released_units:
  description: The units whose drop-in was (or would be) removed; they drop the pinned share when they restart.
  returned: always
  type: list
  elements: str
dropins_changed:
  description: Whether a drop-in was (or would be) removed.
  returned: always
  type: bool
daemon_reloaded:
  description: Whether C(systemctl daemon-reload) ran and succeeded.
  returned: always
  type: bool
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import fail_on_refusal
from ansible_collections.gpusplit.k8s.plugins.module_utils._host.host_files_undo import ARGUMENT_SPEC, execute


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    with fail_on_refusal(module, changed=False):
        result = execute(module.params, module, check_mode=module.check_mode, diff=module._diff)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
