# Copyright: gpusplit contributors
# Apache-2.0
"""What gpu_host_files left on a host, so that a re-run of an unchanged fleet skips it. Private to the collection.

After a run that is not check mode, the module gpu_host_files records in a small JSON file beside the env
file (``host-state.json``) the digest the controller gave it (of everything the host side is made from) and
the SHA-256 of each file it manages as it left them: the toolkit's ``config.toml``, the env file, every
drop-in (null for a file that is absent, such as the config of a toolkit that is not installed), and the
gpusplit drop-ins found in the systemd folder.

The discovery module (nvidia_gpu_facts, option ``host_state_path``) reads it back in its own call and looks
at those files again: ``intact`` only when each one is as recorded and no other gpusplit drop-in has
appeared. The role gpu_host skips gpu_host_files on a host whose recorded digest is this run's and whose
files are intact, so an unchanged host costs one module execution per run, the discovery
(docs/performance.md). No record, another digest, a file edited, removed or added by hand: the module runs.

Standard library only: managed hosts run Python 3.8 to 3.13.
"""

from __future__ import annotations

import hashlib
import json
import os

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError

STATE_NAME = "host-state.json"
FORMAT = 1


class HostStateError(GpusplitError):
    """The record could not be written."""


def file_digest(path):
    """SHA-256 (hex) of the file ``path`` (links followed); None when it does not exist or cannot be read."""
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 16), b""):
                digest.update(block)
    except OSError:
        return None
    return digest.hexdigest()


def find_managed_dropins(directory, name, marker):
    """Files called ``name`` in ``directory`` or one level below it that hold a line starting with ``marker``."""
    found = []
    if not os.path.isdir(directory):
        return found
    candidates = [os.path.join(directory, name)]
    for sub in sorted(os.listdir(directory)):
        full = os.path.join(directory, sub)
        if os.path.isdir(full) and not os.path.islink(full):
            candidates.append(os.path.join(full, name))
    for path in candidates:
        if not os.path.isfile(path):
            continue
        try:
            with open(path, "rb") as handle:
                lines = handle.read().decode("utf-8", "replace").splitlines()
        except OSError:
            continue
        if any(line.startswith(marker) for line in lines):
            found.append(path)
    return found


def _scan(scan):
    """The gpusplit drop-ins found now under the folder of ``scan``."""
    if not scan:
        return []
    return sorted(find_managed_dropins(scan["dir"], scan["name"], scan["marker"]))


def record(path, digest, files, scan=None, backups=None):
    """Write the record of this run: ``digest``, each of ``files`` with its digest now, and (``scan``:
    ``{dir, name, marker}``) the gpusplit drop-ins found there; ``originals``: for each file gpusplit backed up,
    the backup of its first edit (kept from the record before, else ``backups``: {file: backup made now}), what
    an unsplit puts back. Written through a temporary file and a rename, mode 0644; raises HostStateError when
    it cannot be."""
    originals = dict(backups or {})
    try:
        with open(path, encoding="utf-8") as handle:
            before = json.load(handle).get("originals")
        if isinstance(before, dict):
            originals.update({k: v for k, v in before.items() if isinstance(v, str)})
    except (OSError, ValueError, AttributeError):
        pass
    state = {
        "format": FORMAT,
        "digest": digest,
        "files": {f: file_digest(f) for f in sorted(set(files))},
        "scan": dict(scan, found=_scan(scan)) if scan else None,
        "originals": originals,
    }
    directory = os.path.dirname(path) or "."
    try:
        import tempfile  # here: only a write needs it

        os.makedirs(directory, mode=0o755, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", dir=directory)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(state, handle, sort_keys=True)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except OSError as exc:
        raise HostStateError(f"cannot record the applied state in {path}: {exc}") from None
    return state


def read_state(path):
    """``{path, digest, intact, differs}`` of the record at ``path`` (``differs``: the files that are no
    longer as recorded); None when there is no readable record of this format."""
    try:
        with open(path, encoding="utf-8") as handle:
            state = json.load(handle)
    except (OSError, ValueError):
        return None
    if (
        not isinstance(state, dict)
        or state.get("format") != FORMAT
        or not isinstance(state.get("files"), dict)
    ):
        return None
    differs = sorted(f for f, want in state["files"].items() if file_digest(f) != want)
    scan = state.get("scan")
    if isinstance(scan, dict):
        try:
            if _scan(scan) != scan.get("found"):
                differs.append(scan["dir"])
        except (KeyError, TypeError, OSError):
            differs.append(str(scan.get("dir")))
    return {"path": path, "digest": state.get("digest"), "intact": not differs, "differs": differs}


def run_digest(value):
    """The digest of everything a host's run is made from (the controller's side of the record)."""
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode("utf-8")).hexdigest()


def unchanged(state, state_path, digest):
    """Whether ``state`` (what :func:`read_state` gave the discovery) is the record at ``state_path`` of a run
    with ``digest``, and every file it lists is as that run left it: then the host needs no call this run."""
    return bool(
        isinstance(state, dict)
        and state.get("intact") is True
        and state.get("path") == state_path
        and state.get("digest") == digest
    )
