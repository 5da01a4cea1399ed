# Copyright: gpusplit contributors
# Apache-2.0
"""Taking gpusplit's host files back off a host (module gpu_host_undo, playbooks/unsplit.yml).

Private to the collection.

``host_files``:

* ``restore``: the toolkit's ``config.toml`` gets back the original gpusplit backed up before its first edit
  (the record's ``originals``; without one, the oldest ``<file>.gpusplit-<stamp>.bak`` beside it), but only while
  the file is still what gpusplit wrote (its SHA-256 is the record's); otherwise only gpusplit's keys are put
  back to the original's values (the toolkit's defaults where the original did not set them), and the result
  says which keys and why;
* ``remove``: only gpusplit's keys are put back that way, the file is never replaced whole;
* ``keep``: the toolkit's hardening and gpusplit's record stay, said in the result.

Every mode removes the env file and the drop-ins carrying gpusplit's marker (``systemctl daemon-reload`` once
after, where asked), and, but ``keep``, the record and gpusplit's folder when it is empty. gpusplit's backups
stay. Everything is read and decided first (:func:`plan_undo`); then written. Standard library only.
"""

from __future__ import annotations

import glob
import json
import os

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError
from ansible_collections.gpusplit.k8s.plugins.module_utils._host.files import file_diff, os_reason, read_text
from ansible_collections.gpusplit.k8s.plugins.module_utils._host.host_files_record import (
    file_digest,
    find_managed_dropins,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._host.toolkit_config import (
    AS_VOLUME_MOUNTS,
    ENVVAR_WHEN_UNPRIVILEGED,
    TomlEditError,
    edit_config,
    lookup,
    parse,
    split_key,
)

MODES = ("restore", "remove", "keep")
# what the NVIDIA Container Toolkit reads when its config.toml does not set the key
TOOLKIT_DEFAULTS = {ENVVAR_WHEN_UNPRIVILEGED: True, AS_VOLUME_MOUNTS: False}

ARGUMENT_SPEC = {
    "host_files": {"type": "str", "choices": list(MODES), "default": "restore"},
    "state_path": {"type": "path", "required": True},
    "toolkit_path": {"type": "path"},
    "toolkit_keys": {"type": "list", "elements": "str", "default": sorted(TOOLKIT_DEFAULTS), "no_log": False},
    "env_path": {"type": "path"},
    "dropin_dir": {"type": "path"},
    "dropin_name": {"type": "str", "default": "50-gpusplit.conf"},
    "dropin_marker": {"type": "str"},
    "daemon_reload": {"type": "bool", "default": False},
}


class HostUndoError(GpusplitError):
    """A host file cannot be read or put back."""


def read_record(path):
    """The record gpu_host_files left (a mapping), or None."""
    try:
        with open(path, encoding="utf-8") as handle:
            value = json.load(handle)
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def original_backup(path, record):
    """``(backup path, how it was found)`` of the original of ``path``, or ``(None, why)``."""
    originals = (record or {}).get("originals") or {}
    recorded = originals.get(path) if isinstance(originals, dict) else None
    if isinstance(recorded, str) and os.path.isfile(recorded):
        return recorded, "the backup the record names"
    found = sorted(glob.glob(glob.escape(path) + ".gpusplit-*.bak"))
    if found:
        return found[0], "the oldest gpusplit backup beside it"
    return None, "no gpusplit backup of it"


def _values(text, keys, name):
    data = parse(text, name)
    out = {}
    for key in keys:
        table, leaf = split_key(key)
        value = lookup(data, table, leaf)
        out[key] = value if isinstance(value, (bool, int, float, str, list)) else None
    return out


def toolkit_entry(path, keys, mode, record):
    """What happens to the toolkit's config.toml (see the module's docstring); None when it does not exist."""
    if not os.path.exists(path):
        return None
    current = read_text(path)
    entry = {"kind": "toolkit", "path": path, "before": current, "after": current, "changed": False}
    if mode == "keep":
        entry.update(action="keep", note="the toolkit's hardening stays (gpusplit_unsplit_host_files=keep)")
        return entry
    backup, found = original_backup(path, record)
    original = read_text(backup) if backup else None
    recorded = ((record or {}).get("files") or {}).get(path)
    if mode == "restore" and original is not None and recorded and file_digest(path) == recorded:
        entry.update(
            after=original,
            action="restore" if original != current else "none",
            changed=original != current,
            backup=backup,
            note=f"put back from {backup} ({found}): the file is as gpusplit left it",
        )
        return entry
    if mode == "remove":
        why = "gpusplit_unsplit_host_files=remove"
    elif original is None:
        why = f"{found}"
    elif not recorded:
        why = "no record of what gpusplit wrote there"
    else:
        why = "the file changed since gpusplit wrote it"
    try:
        was = _values(original, keys, backup) if original is not None else {}
        now = _values(current, keys, path)
        wanted = {k: was.get(k) if was.get(k) is not None else TOOLKIT_DEFAULTS.get(k) for k in keys}
        # only the keys whose value (the toolkit's default where unset) is not the original's: a key already as
        # the original has it is left as it is written
        wanted = {
            k: v
            for k, v in wanted.items()
            if v is not None and (now.get(k) if now.get(k) is not None else TOOLKIT_DEFAULTS.get(k)) != v
        }
        edit = edit_config(current, wanted, name=path) if wanted else {"text": current, "changed": False}
    except TomlEditError as exc:
        raise exc.prefixed(f"refusing to edit {path}: ") from None
    entry.update(
        after=edit["text"],
        action="keys" if edit["changed"] else "none",
        changed=edit["changed"],
        keys=sorted(wanted),
        note=(
            f"only gpusplit's keys ({', '.join(sorted(wanted))}) put back to "
            f"{'the original' if original is not None else 'the toolkit default'}'s values: {why}"
            if edit["changed"]
            else "gpusplit's keys are as the original has them"
        ),
    )
    return entry


def plan_undo(params):
    """Every change, in the order it is made; nothing is changed."""
    mode = params.get("host_files") or "restore"
    if mode not in MODES:
        raise HostUndoError(f"host_files: {mode!r} is not one of {', '.join(MODES)}")
    record = read_record(params["state_path"])
    entries = []
    report = None
    if params.get("toolkit_path"):
        entry = toolkit_entry(params["toolkit_path"], params.get("toolkit_keys") or [], mode, record)
        report = {"path": params["toolkit_path"], "missing": entry is None}
        if entry is not None:
            entries.append(entry)
    removals = []
    if params.get("env_path"):
        removals.append(("env", params["env_path"], None))
    if params.get("dropin_dir") and params.get("dropin_marker"):
        for path in find_managed_dropins(
            params["dropin_dir"], params["dropin_name"], params["dropin_marker"]
        ):
            unit = os.path.basename(os.path.dirname(path))
            removals.append(("dropin", path, unit[: -len(".d")] if unit.endswith(".d") else unit))
    if mode != "keep":
        removals.append(("record", params["state_path"], None))
    for kind, path, unit in removals:
        if not os.path.lexists(path):
            continue
        entry = {
            "kind": kind,
            "path": path,
            "before": read_text(path) if os.path.isfile(path) else None,
            "after": None,
            "action": "remove",
            "changed": True,
            "note": {
                "env": "gpusplit's env file",
                "dropin": f"gpusplit's drop-in of {unit}",
                "record": "gpusplit's record of this host",
            }[kind],
        }
        if unit:
            entry["unit"] = unit
        entries.append(entry)
    return {"entries": entries, "toolkit": report, "mode": mode}


def apply_undo(module, plan):
    """Write every changed entry; the empty folders gpusplit used go after their files."""
    folders = []
    for entry in plan["entries"]:
        if not entry["changed"]:
            continue
        path = entry["path"]
        try:
            if entry["action"] == "remove":
                os.unlink(path)
                folders.append(os.path.dirname(path))
            else:
                import tempfile  # here: only a write needs it

                fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", dir=os.path.dirname(path))
                with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
                    handle.write(entry["after"])
                module.atomic_move(tmp, path)
        except OSError as exc:
            raise HostUndoError(f"cannot {entry['action']} {path}: {os_reason(exc)}") from None
    for folder in folders:
        try:
            if folder.endswith(".d") or os.path.basename(folder) == "gpusplit":
                os.rmdir(folder)  # only when empty: a folder holding anything else stays
        except OSError:
            pass


def result_of(plan, with_diff):
    files, diffs = [], []
    for entry in plan["entries"]:
        item = {
            k: entry[k]
            for k in ("kind", "path", "action", "changed", "unit", "note", "keys", "backup")
            if k in entry
        }
        if entry["changed"]:
            diff = file_diff(
                entry["before"] or "",
                entry["after"] or "",
                entry["path"],
                entry["path"] + ("" if entry["after"] is not None else " (absent)"),
            )
            if with_diff:
                item["diff"] = diff
                diffs.append(diff)
        files.append(item)
    released = [e["unit"] for e in plan["entries"] if e["kind"] == "dropin" and e["changed"]]
    result = {
        "changed": any(f["changed"] for f in files),
        "files": files,
        "toolkit": plan["toolkit"],
        "host_files": plan["mode"],
        "released_units": released,
        "dropins_changed": bool(released),
    }
    if with_diff:
        result["diff"] = diffs
    return result


def execute(params, module, check_mode=False, diff=False):
    """The whole work of gpu_host_undo: plan, write (not in check mode), reload systemd once where a drop-in went."""
    from ansible_collections.gpusplit.k8s.plugins.module_utils._host.systemd_reload import (
        find_systemctl,
        reload_systemd,
    )

    plan = plan_undo(params)
    released = [e["unit"] for e in plan["entries"] if e["kind"] == "dropin" and e["changed"]]
    if params.get("daemon_reload") and released:
        find_systemctl(module, released, check_mode)
    if not check_mode:
        apply_undo(module, plan)
    result = result_of(plan, diff)
    result["daemon_reloaded"] = False
    reload_systemd(module, result, bool(params.get("daemon_reload")), check_mode=check_mode)
    return result
