# Copyright: gpusplit contributors
# Apache-2.0
"""Every file the role gpu_host owns on a host, checked and written in one pass. Private to the collection.

The controller renders what the host should hold (``plugin_utils/host_files_render.py``: the env file, the
drop-in text, the paths) and decides whether the toolkit is hardened and whether a hardening must be
refused; this file only compares that with the host and changes what differs, so a whole host costs
one module execution:

* the toolkit's ``config.toml``: the keys set through ``toolkit_config.edit_config`` (backup beside
  it first); a missing file is no error (no toolkit on the host), it is reported as missing; a
  ``toolkit_refusal`` message given by the controller ends the run, before anything changes, when the file
  exists (the refusal only applies where the toolkit is installed);
* the env file and every drop-in: content and mode 0644, their folders 0755;
* stale drop-ins: files called ``dropin_name`` in ``dropin_dir/<unit>.d/`` with a line that starts with the
  marker (what the find module's ``contains: ^marker`` matched before) that no listed drop-in names.

Everything is read and compared first (:func:`plan_host_files`); only then is anything written
(:func:`apply_entries`). With ``daemon_reload``, a drop-in that changes needs systemctl: its absence is
refused before anything is written; the reload runs after (``systemd_reload.py``). Standard library
only: managed hosts run Python 3.8 to 3.13.
"""

from __future__ import annotations

import os
import shutil
import stat

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError, type_name
from ansible_collections.gpusplit.k8s.plugins.module_utils._host import host_files_record
from ansible_collections.gpusplit.k8s.plugins.module_utils._host.files import (
    check_link,
    file_diff,
    os_reason,
    read_text,
    write_with_backup,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._host.host_files_record import find_managed_dropins
from ansible_collections.gpusplit.k8s.plugins.module_utils._host.systemd_reload import (
    find_systemctl,
    reload_systemd,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._host.toolkit_config import (
    HARDENING_SETTINGS,
    TomlEditError,
    edit_config,
)

FILE_MODE = 0o644
DIR_MODE = 0o755
DROPIN_KEYS = ("unit", "path", "dir", "content")
DROPIN_NAME = "50-gpusplit.conf"


class HostFilesError(GpusplitError):
    """The input names no valid file, or a file on the host cannot be read or written."""


# the options of gpu_host_files
ARGUMENT_SPEC = {
    "toolkit_path": {"type": "path"},
    "toolkit_settings": {"type": "dict", "default": dict(HARDENING_SETTINGS)},
    "toolkit_backup": {"type": "bool", "default": True},
    "toolkit_refusal": {"type": "str"},
    "env_path": {"type": "path"},
    "env_content": {"type": "str"},
    "dropins": {
        "type": "list",
        "elements": "dict",
        "default": [],
        "options": {
            "unit": {"type": "str", "required": True},
            "path": {"type": "path", "required": True},
            "dir": {"type": "path"},
            "content": {"type": "str"},
        },
    },
    "dropin_content": {"type": "str"},
    "dropin_dir": {"type": "path"},
    "dropin_name": {"type": "str", "default": DROPIN_NAME},
    "dropin_marker": {"type": "str"},
    "state_path": {"type": "path"},
    "state_digest": {"type": "str"},
    "daemon_reload": {"type": "bool", "default": False},
    "obsolete_dirs": {"type": "list", "elements": "path", "default": []},
    "follow_links": {"type": "bool", "default": False},
}
SPEC_RULES = {
    "required_together": [
        ("env_path", "env_content"),
        ("dropin_dir", "dropin_marker"),
        ("state_path", "state_digest"),
    ],
}


# --------------------------------------------------------------------------------------------
# input


def _text(errors, where, value):
    if not isinstance(value, str):
        errors.append(f"{where} must be a string, got {type_name(value)}")
        return False
    return True


def _abs_path(errors, where, value):
    if not _text(errors, where, value):
        return False
    if not value.startswith("/") or "\x00" in value:
        errors.append(f"{where}: {value!r} is not an absolute path")
        return False
    return True


def _pair(errors, params, first, second):
    """Both or neither of two options that go together."""
    if (params.get(first) is None) != (params.get(second) is None):
        given, missing = (first, second) if params.get(first) is not None else (second, first)
        errors.append(f"{given} is given without {missing}: give both or neither")


def check_input(params):
    """Refuse (HostFilesError, every problem named by its option) input that names no valid file.

    ``params`` are the module's options: ``toolkit_path``, ``toolkit_settings``, ``toolkit_backup``,
    ``toolkit_refusal``, ``env_path``, ``env_content``, ``dropins`` (``unit``, ``path``, ``dir``,
    ``content``), ``dropin_content``, ``dropin_dir``, ``dropin_name``, ``dropin_marker``, ``obsolete_dirs``.
    """
    errors = []
    obsolete = params.get("obsolete_dirs") or []
    if not isinstance(obsolete, (list, tuple)):
        errors.append(f"obsolete_dirs must be a list of folders, got {type_name(obsolete)}")
        obsolete = []
    for i, folder in enumerate(obsolete):
        if _abs_path(errors, f"obsolete_dirs[{i}]", folder) and os.path.normpath(folder) == "/":
            errors.append(f"obsolete_dirs[{i}]: {folder!r} is the root folder")
    _pair(errors, params, "env_path", "env_content")
    if params.get("env_path") is not None:
        _abs_path(errors, "env_path", params["env_path"])
    if params.get("env_content") is not None:
        _text(errors, "env_content", params["env_content"])
    dropins = params.get("dropins") or []
    if not isinstance(dropins, (list, tuple)):
        errors.append(f"dropins must be a list, got {type_name(dropins)}")
        dropins = []
    shared = params.get("dropin_content")
    if shared is not None:
        _text(errors, "dropin_content", shared)
    paths = set()
    for i, item in enumerate(dropins):
        where = f"dropins[{i}]"
        if not isinstance(item, dict):
            errors.append(f"{where} must be a mapping of unit, path and content, got {type_name(item)}")
            continue
        unknown = sorted(str(k) for k in item if k not in DROPIN_KEYS)
        if unknown:
            errors.append(f"{where}: unknown key(s) {', '.join(unknown)} (known: {', '.join(DROPIN_KEYS)})")
        _text(errors, f"{where}.unit", item.get("unit"))
        if item.get("content") is not None:
            _text(errors, f"{where}.content", item["content"])
        elif shared is None:
            errors.append(
                f"{where}.content: no text for {item.get('path')!r} (give content or dropin_content)"
            )
        if _abs_path(errors, f"{where}.path", item.get("path")):
            norm = os.path.normpath(item["path"])
            if norm in paths:
                errors.append(f"{where}.path: {item['path']} is listed twice")
            paths.add(norm)
            folder = item.get("dir")
            if folder is not None and (
                not isinstance(folder, str) or os.path.normpath(folder) != os.path.dirname(norm)
            ):
                errors.append(f"{where}.dir: {folder!r} is not the folder of {where}.path {item['path']!r}")
    _pair(errors, params, "dropin_dir", "dropin_marker")
    if params.get("dropin_dir") is not None:
        _abs_path(errors, "dropin_dir", params["dropin_dir"])
        name = DROPIN_NAME if params.get("dropin_name") is None else params["dropin_name"]
        if _text(errors, "dropin_name", name) and (not name or "/" in name or name in (".", "..")):
            errors.append(f"dropin_name: {name!r} is not a file name")
        marker = params.get("dropin_marker")
        if _text(errors, "dropin_marker", marker) and not marker.strip():
            errors.append("dropin_marker is empty: only files carrying gpusplit's marker are removed")
    if params.get("toolkit_path") is not None:
        _abs_path(errors, "toolkit_path", params["toolkit_path"])
        settings = params.get("toolkit_settings")
        if not isinstance(settings, dict) or not settings:
            errors.append(f"toolkit_settings must be a non-empty mapping of key -> value, got {settings!r}")
        if params.get("toolkit_refusal") is not None:
            _text(errors, "toolkit_refusal", params["toolkit_refusal"])
    if errors:
        raise HostFilesError(errors)


# --------------------------------------------------------------------------------------------
# reading the host


def _mode_of(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def _dir_entries(path, seen):
    """Entries for the folders up to ``path`` that are missing, or ``path`` itself when its mode is not 0755."""
    path = os.path.normpath(path)
    if path in seen:
        return []
    seen.add(path)
    if os.path.isdir(path):
        if _mode_of(path) != DIR_MODE:
            return [{"kind": "directory", "path": path, "action": "mode", "changed": True}]
        return []
    if os.path.lexists(path):
        raise HostFilesError(f"{path} exists and is not a directory")
    return [{"kind": "directory", "path": path, "action": "create", "changed": True}]


def _links_checked(path, follow):
    """Whether ``path`` is a link to write through (``follow_links``); a link is refused otherwise, before
    anything is changed."""
    if not os.path.islink(path):
        return False
    if not follow:
        check_link(path, "follow_links")
    return True


def file_entry(kind, path, content, unit=None, follow=False):
    """What writing ``content`` to ``path`` (mode 0644) would change: an entry with ``changed``, ``before``, ``after``.
    A symbolic link is refused unless ``follow`` (follow_links); its target then keeps its own mode."""
    link = _links_checked(path, follow)
    exists = os.path.exists(path) if link else os.path.lexists(path)
    before = read_text(path) if exists else None
    mode_fix = exists and not link and _mode_of(path) != FILE_MODE
    entry = {
        "kind": kind,
        "path": path,
        "before": before,
        "after": content,
        "action": "create"
        if not exists
        else ("write" if before != content else ("mode" if mode_fix else "none")),
    }
    if unit is not None:
        entry["unit"] = unit
    entry["follow"] = link
    entry["changed"] = entry["action"] != "none"
    return entry


def toolkit_entry(params):
    """The toolkit's config.toml edit, or None when the file does not exist; refuses as the controller asked."""
    path = params["toolkit_path"]
    real = os.path.realpath(path)
    if not os.path.exists(real):
        return None
    link = _links_checked(path, params.get("follow_links"))
    if params.get("toolkit_refusal"):
        raise HostFilesError(params["toolkit_refusal"])
    before = read_text(real, path)
    try:
        edit = edit_config(before, params["toolkit_settings"], name=path)
    except TomlEditError as exc:
        raise exc.prefixed(f"refusing to edit {path}: ") from None
    return {
        "kind": "toolkit",
        "path": path,
        "before": before,
        "after": edit["text"],
        "action": "write" if edit["changed"] else "none",
        "changed": edit["changed"],
        "backup": params.get("toolkit_backup", True) is not False,
        "follow": link,
        "settings_before": edit["before"],
        "settings_after": edit["after"],
        "changes": edit["changes"],
    }


def plan_host_files(params):
    """Everything that differs on the host, in the order it is written; nothing is changed.

    ``params``: as :func:`check_input`. Returns ``{"entries": [...], "toolkit": {...} | None}``;
    ``toolkit`` is None without ``toolkit_path``, ``{"path", "missing": True}`` when the file does not exist.
    """
    check_input(params)
    entries = []
    report = None
    if params.get("toolkit_path") is not None:
        entry = toolkit_entry(params)
        report = {"path": params["toolkit_path"], "missing": entry is None}
        if entry is not None:
            entries.append(entry)
    seen = set()
    if params.get("env_path") is not None:
        entries.extend(_dir_entries(os.path.dirname(params["env_path"]), seen))
        entries.append(
            file_entry("env", params["env_path"], params["env_content"], follow=params.get("follow_links"))
        )
    keep = set()
    for item in params.get("dropins") or []:
        keep.add(os.path.normpath(item["path"]))
        content = item.get("content")
        if content is None:
            content = params["dropin_content"]
        entries.extend(_dir_entries(os.path.dirname(item["path"]), seen))
        entries.append(
            file_entry("dropin", item["path"], content, unit=item["unit"], follow=params.get("follow_links"))
        )
    if params.get("dropin_dir") is not None:
        name = params.get("dropin_name") or DROPIN_NAME
        for path in find_managed_dropins(params["dropin_dir"], name, params["dropin_marker"]):
            if os.path.normpath(path) in keep:
                continue
            unit = os.path.basename(os.path.dirname(path))
            entries.append(
                {
                    "kind": "stale_dropin",
                    "path": path,
                    "unit": unit[: -len(".d")] if unit.endswith(".d") else unit,
                    "before": read_text(path),
                    "after": None,
                    "action": "remove",
                    "changed": True,
                }
            )
    for folder in params.get("obsolete_dirs") or []:
        # a folder an earlier version of gpusplit kept on the host (not a link, not a file: those are not ours)
        gone = not os.path.isdir(folder) or os.path.islink(folder)
        entries.append(
            {
                "kind": "obsolete_dir",
                "path": folder,
                "action": "none" if gone else "remove",
                "changed": not gone,
            }
        )
    return {"entries": entries, "toolkit": report}


# --------------------------------------------------------------------------------------------
# writing


def apply_entries(module, entries):
    """Write every changed entry (``module``: the AnsibleModule, for atomic_move); sets ``backup_file``.

    HostFilesError where one cannot be written; that entry and the ones after it are then marked unchanged
    (nothing of them was written: each file is replaced whole or not at all), so that the result still says
    what was."""
    for done, entry in enumerate(entries):
        if not entry["changed"]:
            continue
        path = entry["path"]
        try:
            if entry["kind"] == "directory":
                if entry["action"] == "create":
                    os.makedirs(path, mode=DIR_MODE, exist_ok=True)
                os.chmod(path, DIR_MODE)
            elif entry["kind"] == "obsolete_dir":
                shutil.rmtree(path)
            elif entry["action"] == "remove":
                os.unlink(path)
            elif entry["action"] == "mode":
                os.chmod(path, FILE_MODE)
            else:
                new = entry["action"] == "create"
                backup = write_with_backup(
                    module,
                    path,
                    entry["after"],
                    "beside" if entry["kind"] == "toolkit" and entry.get("backup") else None,
                    new_file=new,
                    mode=FILE_MODE if new else None,
                    follow=entry.get("follow", False),
                    option="follow_links",
                )
                if backup:
                    entry["backup_file"] = backup
                if (
                    not new
                    and entry["kind"] != "toolkit"
                    and not entry.get("follow")
                    and _mode_of(path) != FILE_MODE
                ):
                    os.chmod(path, FILE_MODE)
        except OSError as exc:
            for left in entries[done:]:
                left["changed"] = False
            raise HostFilesError(
                f"cannot {'remove' if entry['action'] == 'remove' else 'write'} {path}: {os_reason(exc)}"
            ) from None


def result_of(plan, with_diff):
    """The module's result: per file changed (and diff), the units to restart, the toolkit's report."""
    files = []
    diffs = []
    for entry in plan["entries"]:
        item = {k: entry[k] for k in ("kind", "path", "action", "changed") if k in entry}
        for key in ("unit", "backup_file", "changes"):
            if key in entry:
                item[key] = entry[key]
        if entry["kind"] not in ("directory", "obsolete_dir") and entry["changed"]:
            before = entry["before"] or ""
            after = entry["after"] or ""
            absent = " (absent)"
            diff = file_diff(
                before,
                after,
                entry["path"] + ("" if entry["before"] is not None else absent),
                entry["path"] + ("" if entry["after"] is not None else absent),
            )
            if with_diff:
                item["diff"] = diff
                diffs.append(diff)
        files.append(item)
    pinned, released = changed_units(plan["entries"])
    toolkit = plan["toolkit"]
    if toolkit is not None and not toolkit["missing"]:
        entry = next(e for e in plan["entries"] if e["kind"] == "toolkit")
        toolkit = dict(
            toolkit,
            changed=entry["changed"],
            before=entry["settings_before"],
            after=entry["settings_after"],
            changes=entry["changes"],
        )
        if "backup_file" in entry:
            toolkit["backup_file"] = entry["backup_file"]
    result = {
        "changed": any(f["changed"] for f in files),
        "files": files,
        "toolkit": toolkit,
        "restart_units": pinned,
        "released_units": released,
        "dropins_changed": bool(pinned or released),
    }
    if with_diff:
        result["diff"] = diffs
    return result


def changed_units(entries):
    """``(pinned, released)``: the units whose drop-in this plan writes (created or rewritten) and those whose
    stale drop-in it removes; what a restart and a systemd daemon-reload are for."""
    changed = [e for e in entries if e["changed"]]
    pinned = [e["unit"] for e in changed if e["kind"] == "dropin" and e["action"] in ("create", "write")]
    released = [e["unit"] for e in changed if e["kind"] == "stale_dropin"]
    return pinned, released


def host_files(module, params, check_mode=False, with_diff=False):
    """Plan, then (unless ``check_mode``) write; the module's result. Refusals raise HostFilesError.

    With ``params["daemon_reload"]`` and a drop-in that changes, a host without systemctl is refused
    (SystemdReloadError) before anything is written, in check mode too; the reload itself runs after,
    ``systemd_reload.reload_systemd``. ``daemon_reloaded`` is False in the result returned here.
    """
    plan = plan_host_files(params)
    if params.get("daemon_reload"):
        pinned, released = changed_units(plan["entries"])
        units = pinned + released
        if units:
            find_systemctl(module, units, check_mode)
    if not check_mode:
        try:
            apply_entries(module, plan["entries"])
        except HostFilesError as exc:  # (the files before the one that failed are written: said)
            exc.result = dict(result_of(plan, with_diff), daemon_reloaded=False)
            raise
    result = result_of(plan, with_diff)
    result["daemon_reloaded"] = False
    return result


def record_state(params, result=None):
    """The record of what this run left: every file the module manages, the drop-in folder's scan, and the
    toolkit's backup where this run made one (``result``: this run's, whose ``toolkit.backup_file``)."""
    files = [params[key] for key in ("toolkit_path", "env_path") if params.get(key)]
    files += [item["path"] for item in params["dropins"] or []]
    scan = None
    if params.get("dropin_dir"):
        scan = {
            "dir": params["dropin_dir"],
            "name": params.get("dropin_name") or DROPIN_NAME,
            "marker": params["dropin_marker"],
        }
    backup = ((result or {}).get("toolkit") or {}).get("backup_file")
    backups = {params["toolkit_path"]: backup} if backup and params.get("toolkit_path") else None
    return host_files_record.record(
        params["state_path"], params["state_digest"], files, scan=scan, backups=backups
    )


def execute(params, module, check_mode=False, diff=False):
    """The whole work of gpu_host_files (``module``: its AnsibleModule): check and write the files, record them
    (``state_path``; a failed record is a warning), run ``systemctl daemon-reload`` where asked.

    Returns the module's result. Raises a GpusplitError to refuse: before any write, or with ``result`` set
    where the files were written and the reload failed.
    """
    result = host_files(module, params, check_mode=check_mode, with_diff=diff)
    if params.get("state_path") and not check_mode:
        try:
            result["state"] = record_state(params, result)
        except host_files_record.HostStateError as exc:
            module.warn(str(exc))
    try:  # after the files (and their record): a failure here reports what was written
        reload_systemd(module, result, params["daemon_reload"], check_mode=check_mode)
    except GpusplitError as exc:
        exc.result = dict(result)
        raise
    return result
