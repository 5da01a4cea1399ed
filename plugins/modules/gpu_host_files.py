#!/usr/bin/python
# Copyright: gpusplit contributors
# Apache-2.0
"""Ansible module gpusplit.k8s.gpu_host_files: the host side of the split in one call."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_host_files
short_description: Check and write every file of a host's GPU split in one call (toolkit keys, env file, drop-ins)
version_added: "0.1.0"
description:
  - The host side of the role C(gpusplit.k8s.gpu_host) in one module execution, so that a host costs one
    round trip however many files it has. The controller renders the texts (filter C(gpusplit.k8s.host_files))
    and decides whether the toolkit is hardened; this module compares them with the host and changes only what
    differs.
  - Sets keys in the NVIDIA Container Toolkit's C(config.toml) as M(gpusplit.k8s.nvidia_toolkit_config) does
    (edited as text, everything else kept byte for byte, a backup beside it first). A missing file is no error
    (the host has no toolkit); the result says so.
  - Writes the env file and each drop-in (mode C(0644), their folders C(0755)) and removes the drop-ins named
    O(dropin_name) below O(dropin_dir) that carry O(dropin_marker) and that O(dropins) no longer lists. Files
    without the marker are never removed.
  - Everything is read and compared before anything is written; a refusal changes nothing.
  - With O(daemon_reload), runs C(systemctl daemon-reload) itself after writing when a drop-in was written or
    removed, so that the host needs no task of its own for it.
author:
  - gpusplit team (!UNKNOWN)
options:
  toolkit_path:
    description:
      - The toolkit's configuration file (C(/etc/nvidia-container-runtime/config.toml) below the host root).
        Leave out to leave the toolkit alone.
    type: path
  toolkit_settings:
    description:
      - Keys to set in O(toolkit_path), C(key) or C(table.key), as in M(gpusplit.k8s.nvidia_toolkit_config)
        (types checked the same way). The default is gpusplit's hardening.
    type: dict
    default:
      accept-nvidia-visible-devices-envvar-when-unprivileged: false
      accept-nvidia-visible-devices-as-volume-mounts: true
  toolkit_backup:
    description:
      - Copy O(toolkit_path) to C(<path>.gpusplit-<UTC timestamp>.bak) before changing it (through a temporary
        file, synced, with the file's mode and owner). The copy is removed again when the write is refused.
    type: bool
    default: true
  follow_links:
    description:
      - Write through a file that is a symbolic link (O(toolkit_path), O(env_path), a drop-in) to the file it
        points to, keeping that file's mode and owner.
      - By default such a link is refused before anything changes, so that no other file is changed through it.
    type: bool
    default: false
  toolkit_refusal:
    description:
      - A refusal decided on the controller that applies only where the toolkit is installed. When
        O(toolkit_path) exists the module fails with this message before it changes anything. Empty means none.
    type: str
  env_path:
    description: The host's GPU environment file (C(/etc/gpusplit/host-gpus.env)); with O(env_content).
    type: path
  env_content:
    description: The whole text of O(env_path).
    type: str
  dropins:
    description: The systemd drop-ins to write, one per host service.
    type: list
    elements: dict
    default: []
    suboptions:
      unit:
        description: The unit (C(trainer.service)); reported in RV(restart_units) when its drop-in changed.
        type: str
        required: true
      path:
        description: The drop-in's absolute path (C(/etc/systemd/system/<unit>.d/50-gpusplit.conf)).
        type: path
        required: true
      dir:
        description: Its folder; when given it must be the folder of O(dropins[].path) (the host share lists both).
        type: path
      content:
        description: Its whole text; O(dropin_content) when left out.
        type: str
  dropin_content:
    description: The text of every drop-in of O(dropins) that has no C(content) of its own.
    type: str
  dropin_dir:
    description:
      - The systemd unit folder where earlier runs wrote drop-ins (in its C(<unit>.d) folders); those not in
        O(dropins) are removed. With O(dropin_marker). Leave out to remove nothing.
    type: path
  dropin_name:
    description: The drop-in's file name.
    type: str
    default: 50-gpusplit.conf
  dropin_marker:
    description: Only a file with a line that starts with this text is removed.
    type: str
  state_path:
    description:
      - Where to record what this run left on the host (outside check mode), that is O(state_digest) and the SHA-256 of
        each file the module manages and of the gpusplit drop-ins found under O(dropin_dir). The module
        M(gpusplit.k8s.nvidia_gpu_facts) reads it back (its option C(host_state_path))
        and the role C(gpusplit.k8s.gpu_host) skips this module on a host whose record holds this run's digest and
        whose files are as recorded (docs/performance.md). With O(state_digest). Leave out to record nothing.
      - A record that cannot be written is a warning, not a failure (the next run then runs the module).
    type: path
  state_digest:
    description: The controller's digest of everything this call is made from (role C(gpusplit.k8s.gpu_host)).
    type: str
  daemon_reload:
    description:
      - Run C(systemctl daemon-reload) (systemctl found in C(PATH) and the sbin folders) after writing, when a drop-in
        was written or removed (RV(dropins_changed)); nothing runs when no drop-in changed. RV(daemon_reloaded) says
        whether it ran.
      - Where a drop-in changes and systemctl is not on the host, the module fails before it writes anything (in
        check mode too). When the command fails, the module fails naming the command, its return code and its
        error output; the files are written (and recorded, with O(state_path)) by then, so run the reload on the
        host by hand, or leave this option off where systemd does not manage the host (role variable
        C(gpusplit_systemd_reload)).
      - In check mode nothing runs, RV(daemon_reloaded) is V(false) even where a drop-in would change.
      - Leave off when the files are below a host root that is not the host's C(/) (tests, a chroot).
    type: bool
    default: false
  obsolete_dirs:
    description:
      - Folders that an earlier version of gpusplit kept on the host and that nothing uses any more; each one that
        exists as a folder (not a link) is removed with everything in it, and is listed in RV(files) with
        C(kind=obsolete_dir). A path that is missing, a file or a link is left alone.
      - The role C(gpusplit.k8s.gpu_host) passes the code cache folder of gpusplit 0.1 (C(/var/cache/gpusplit) under
        C(gpusplit_host_root)).
    type: list
    elements: path
    default: []
notes:
  - Supports check mode and diff mode; the diff holds one before/after per changed file.
  - Runs on the Pythons that the controller's ansible-core supports on managed hosts, with the standard library
    only.
  - Files are replaced through AnsibleModule's C(atomic_move). An existing file keeps its owner, group, mode,
    extended attributes and SELinux context, a new one gets the policy's default context and mode 0644.
  - It restarts no service; RV(restart_units) and RV(released_units) name the services that take the change when
    they restart. It reloads systemd only with O(daemon_reload).
extends_documentation_fragment:
  - gpusplit.k8s.attributes.check_mode_and_diff
"""

EXAMPLES = r"""
- name: Write the host share of a node and harden its toolkit
  gpusplit.k8s.gpu_host_files:
    toolkit_path: /etc/nvidia-container-runtime/config.toml
    env_path: "{{ share.env_path }}"
    env_content: "{{ share.env_text }}"
    dropins: "{{ share.dropins }}"
    dropin_content: "{{ share.dropin_text }}"
    dropin_dir: "{{ share.systemd_dir }}"
    dropin_marker: "{{ share.marker }}"
  vars:
    share: "{{ node_plan | gpusplit.k8s.host_files(['trainer.service']) }}"

- name: The same, and systemctl daemon-reload when a drop-in was written or removed
  gpusplit.k8s.gpu_host_files:
    env_path: "{{ share.env_path }}"
    env_content: "{{ share.env_text }}"
    dropins: "{{ share.dropins }}"
    dropin_content: "{{ share.dropin_text }}"
    dropin_dir: "{{ share.systemd_dir }}"
    dropin_marker: "{{ share.marker }}"
    daemon_reload: true
  register: host_files
  vars:
    share: "{{ node_plan | gpusplit.k8s.host_files(['trainer.service']) }}"
"""

RETURN = r"""
files:
  description:
    - One entry per file or folder the module looked at and found different, plus every file it compared; each
      with C(kind) (V(toolkit), V(env), V(dropin), V(stale_dropin), V(directory)), C(path), C(action) (V(none),
      V(create), V(write), V(mode), V(remove)) and C(changed); C(unit) for drop-ins; C(diff) in diff mode.
  returned: always
  type: list
  elements: dict
toolkit:
  description:
    - The toolkit's file, C(path) and C(missing); when it exists also C(changed), C(before) and C(after) (each
      setting's value), C(changes) and, after a change with O(toolkit_backup), C(backup_file). Null without
      O(toolkit_path).
  returned: always
  type: dict
restart_units:
  description: The units whose drop-in was (or would be) written; they take the share when they restart.
  returned: always
  type: list
  elements: str
released_units:
  description: The units whose stale drop-in was (or would be) removed.
  returned: always
  type: list
  elements: str
dropins_changed:
  description: Whether a drop-in was (or, in check mode, would be) written or removed (systemd needs a daemon-reload).
  returned: always
  type: bool
daemon_reloaded:
  description:
    - Whether this call ran C(systemctl daemon-reload), successfully (O(daemon_reload) and RV(dropins_changed)).
    - Always V(false) in check mode, where nothing runs, even when a drop-in would change.
  returned: always
  type: bool
state:
  description: With O(state_path) outside check mode, the record written (C(digest), C(files), C(scan)).
  returned: when O(state_path) is set and the module is not in check mode
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import fail_on_refusal
from ansible_collections.gpusplit.k8s.plugins.module_utils._host.host_files_apply import (
    ARGUMENT_SPEC,
    SPEC_RULES,
    execute,
)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True, **SPEC_RULES)
    with fail_on_refusal(module, changed=False):
        result = execute(module.params, module, check_mode=module.check_mode, diff=module._diff)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
