#!/usr/bin/python
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
  - gpusplit team
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
      - Types are kept as given; the string V("false") is written as a TOML string, not a boolean.
      - The default turns off E(NVIDIA_VISIBLE_DEVICES) for unprivileged containers and accepts the device list
        as volume mounts instead (what the device plugin's C(DEVICE_LIST_STRATEGY=volume-mounts) uses).
    type: dict
    default:
      accept-nvidia-visible-devices-envvar-when-unprivileged: false
      accept-nvidia-visible-devices-as-volume-mounts: true
  backup:
    description:
      - Copy the file to C(<path>.gpusplit-<UTC timestamp>.bak) before changing it.
    type: bool
    default: true
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
import shutil
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpusplit.k8s.plugins.module_utils._host.files import write_atomic
from ansible_collections.gpusplit.k8s.plugins.module_utils._host.toolkit_config import (
    DEFAULT_PATH,
    HARDENING_SETTINGS,
    TomlEditError,
    edit_config,
)


def not_installed_message(path):
    return f"nvidia-container-toolkit is not installed on this host: {path} not found"


def backup_name(path, now=None):
    """``<path>.gpusplit-<UTC timestamp>.bak``; never an existing file."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    candidate = f"{path}.gpusplit-{stamp}.bak"
    n = 1
    while os.path.lexists(candidate):
        candidate = f"{path}.gpusplit-{stamp}.{n}.bak"
        n += 1
    return candidate


def run(module):
    p = module.params
    path = p["path"]
    real = os.path.realpath(path)
    exists = os.path.exists(real)
    if exists and not os.path.isfile(real):
        module.fail_json(msg=f"{path} is not a regular file", path=path)
    if not exists and not p["create"]:
        module.fail_json(msg=not_installed_message(path), path=path, missing=True)

    if exists:
        with open(real, "rb") as handle:
            raw = handle.read()
        try:
            before_text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            module.fail_json(msg=f"{path} is not UTF-8 text: {exc}", path=path)
    else:
        before_text = ""

    try:
        edit = edit_config(before_text, p["settings"], name=path)
    except TomlEditError as exc:
        module.fail_json(msg=f"refusing to edit {path}: {exc}", path=path)

    result = {
        "changed": edit["changed"] or not exists,
        "path": path,
        "created": not exists,
        "before": edit["before"],
        "after": edit["after"],
        "changes": edit["changes"],
    }
    if module._diff:
        result["diff"] = {
            "before": before_text,
            "after": edit["text"],
            "before_header": path if exists else f"{path} (absent)",
            "after_header": path,
        }
    if not result["changed"] or module.check_mode:
        return result

    if not exists:
        os.makedirs(os.path.dirname(os.path.abspath(real)), mode=0o755, exist_ok=True)
    elif p["backup"]:
        backup = backup_name(real)
        shutil.copy2(real, backup)
        result["backup_file"] = backup
    write_atomic(module, real, edit["text"], new_file=not exists)
    return result


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", default=DEFAULT_PATH),
            settings=dict(type="dict", default=dict(HARDENING_SETTINGS)),
            backup=dict(type="bool", default=True),
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
