#!/usr/bin/python
# Copyright: gpusplit contributors
# Apache-2.0
"""Ansible module gpusplit.k8s.nvidia_toolkit_config: set keys in the nvidia-container-runtime config.toml."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: nvidia_toolkit_config
short_description: Set keys in the NVIDIA Container Toolkit's config.toml, keeping everything else byte for byte
version_added: "0.1.0"
description:
  - Sets top-level keys and keys inside tables of C(/etc/nvidia-container-runtime/config.toml), the
    configuration of C(nvidia-container-runtime), C(nvidia-container-runtime-hook) and C(nvidia-ctk).
  - The file is edited as text, so comments, ordering and formatting stay exactly as they were. An existing
    assignment of the key in the right table gets the new value; otherwise a commented-out default
    (C(#key = ...), as the toolkit generates them) becomes the assignment; otherwise C(key = value) is added at
    the end of the table's section (top-level keys before the first C([table])), or a new table is appended.
  - The file must parse as TOML before the edit (the module refuses to touch a broken file) and the result is
    parsed again and checked to hold exactly the requested values, and nothing else changed, before it is
    written (atomically, keeping the file's owner and mode).
  - The default O(settings) are gpusplit's hardening, so that pods can no longer pick GPUs by setting
    E(NVIDIA_VISIBLE_DEVICES) themselves. See docs/hardening.md.
author:
  - gpusplit team (!UNKNOWN)
options:
  path:
    description:
      - The toolkit's configuration file.
    type: path
    default: /etc/nvidia-container-runtime/config.toml
  settings:
    description:
      - Keys to set, each C(key) (top level) or C(table.key) / C(table.subtable.key) (inside a table), with a
        boolean, integer, float, string or list value. Each part must be a bare TOML key.
      - Types are kept as given. A key the toolkit knows must have the type the toolkit reads it as (boolean,
        string or list of strings; every key of C([features]) is a boolean), so the string V("false") for
        C(accept-nvidia-visible-devices-envvar-when-unprivileged) is refused instead of being written as a
        TOML string that the toolkit would not read as false. Keys it does not know take any of the types above.
      - The default turns off E(NVIDIA_VISIBLE_DEVICES) for unprivileged containers and accepts the device list
        as volume mounts instead (what the device plugin's C(DEVICE_LIST_STRATEGY=volume-mounts) uses).
    type: dict
    default:
      accept-nvidia-visible-devices-envvar-when-unprivileged: false
      accept-nvidia-visible-devices-as-volume-mounts: true
  backup:
    description:
      - Copy the file to C(<path>.gpusplit-<UTC timestamp>.bak) before changing it (through a temporary file,
        synced, with the file's mode and owner). The copy is removed again when the write is refused.
    type: bool
    default: true
  follow:
    description:
      - When O(path) is a symbolic link, edit the file it points to (keeping that file's mode and owner).
      - By default a link is refused, so that no other file is changed through it.
    type: bool
    default: false
  create:
    description:
      - Create the file (and its directory) when it does not exist.
      - "By default a missing file fails with C(nvidia-container-toolkit is not installed on this host: <path> not
        found), because a config.toml without the toolkit protects nothing."
    type: bool
    default: false
  state:
    description:
      - Only V(present) (the keys hold the given values).
    type: str
    choices: [present]
    default: present
notes:
  - Supports check mode and diff mode.
  - Runs on every managed-host Python the controller's ansible-core supports (3.8 and later with 2.19, 3.9 and
    later with 2.20 and 2.21) with the standard library only; TOML is read by the collection's
    own TOML 1.0 reader (C(tomllib) is only in Python 3.11 and later). See docs/hardening.md.
  - The toolkit reads the file for every container it starts; no service needs a restart.
  - Under the GPU Operator the toolkit container keeps its own copy of the file; set the same keys through the
    ClusterPolicy C(toolkit.env) there (C(ACCEPT_NVIDIA_VISIBLE_DEVICES_ENVVAR_WHEN_UNPRIVILEGED),
    C(ACCEPT_NVIDIA_VISIBLE_DEVICES_AS_VOLUME_MOUNTS)).
extends_documentation_fragment:
  - gpusplit.k8s.attributes.check_mode_and_diff
"""

EXAMPLES = r"""
- name: Harden the NVIDIA Container Toolkit (the default settings)
  gpusplit.k8s.nvidia_toolkit_config:

- name: Also run the toolkit without cgroups handling (rootless setups)
  gpusplit.k8s.nvidia_toolkit_config:
    path: /etc/nvidia-container-runtime/config.toml
    settings:
      accept-nvidia-visible-devices-envvar-when-unprivileged: false
      accept-nvidia-visible-devices-as-volume-mounts: true
      nvidia-container-cli.no-cgroups: true
"""

RETURN = r"""
path:
  description: The file.
  returned: always
  type: str
created:
  description: Whether the file did not exist and was (or, in check mode, would be) created.
  returned: always
  type: bool
backup_file:
  description: The copy of the previous file.
  returned: when the file changed, O(backup=true), the file existed and not in check mode
  type: str
  sample: /etc/nvidia-container-runtime/config.toml.gpusplit-20260101T120000Z.bak
before:
  description: Each setting's value before (null when it was not set).
  returned: always
  type: dict
  sample: {accept-nvidia-visible-devices-envvar-when-unprivileged: null}
after:
  description: Each setting's value after.
  returned: always
  type: dict
  sample: {accept-nvidia-visible-devices-envvar-when-unprivileged: false}
changes:
  description:
    - One entry per setting with C(key), C(before), C(after) and C(action) (V(unchanged), V(replaced),
      V(uncommented) or V(inserted)).
  returned: always
  type: list
  elements: dict
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError, fail_on_refusal
from ansible_collections.gpusplit.k8s.plugins.module_utils._host.files import (
    check_link,
    file_diff,
    read_text,
    write_with_backup,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._host.toolkit_config import (
    DEFAULT_PATH,
    HARDENING_SETTINGS,
    TomlEditError,
    edit_config,
)


def not_installed_message(path):
    return f"nvidia-container-toolkit is not installed on this host: {path} not found"


def run(module):
    p = module.params
    path = p["path"]
    real = os.path.realpath(path)
    exists = os.path.exists(real)
    if not exists and not p["create"]:
        module.fail_json(msg=not_installed_message(path), path=path, missing=True)
    with fail_on_refusal(module, path=path, changed=False):
        if not p["follow"]:
            check_link(path)
        return _run(module, p, path, real, exists)


def _run(module, p, path, real, exists):
    """The work of run(); every refusal is a GpusplitError."""
    before_text = read_text(real, path) if exists else ""
    try:
        edit = edit_config(before_text, p["settings"], name=path)
    except TomlEditError as exc:
        raise exc.prefixed(f"refusing to edit {path}: ") from None

    result = {
        "changed": edit["changed"] or not exists,
        "path": path,
        "created": not exists,
        "before": edit["before"],
        "after": edit["after"],
        "changes": edit["changes"],
    }
    if module._diff:
        result["diff"] = file_diff(before_text, edit["text"], path if exists else f"{path} (absent)", path)
    if not result["changed"] or module.check_mode:
        return result

    try:
        if not exists:
            os.makedirs(os.path.dirname(os.path.abspath(real)), mode=0o755, exist_ok=True)
        backup = write_with_backup(
            module,
            path,
            edit["text"],
            "beside" if p["backup"] else None,
            new_file=not exists,
            follow=p["follow"],
        )
        if backup:
            result["backup_file"] = backup
    except OSError as exc:
        raise GpusplitError(f"cannot write {path}: {exc}") from None
    return result


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", default=DEFAULT_PATH),
            settings=dict(type="dict", default=dict(HARDENING_SETTINGS)),
            backup=dict(type="bool", default=True),
            follow=dict(type="bool", default=False),
            create=dict(type="bool", default=False),
            state=dict(type="str", choices=["present"], default="present"),
        ),
        supports_check_mode=True,
    )
    if not module.params["settings"]:
        module.fail_json(msg="settings is empty: name at least one key to set")
    module.exit_json(**run(module))


if __name__ == "__main__":
    main()
