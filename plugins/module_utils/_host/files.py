# Copyright: gpusplit contributors
# Apache-2.0
"""Writing a file on a host the one way gpusplit's modules do it."""

from __future__ import annotations

import os
import shutil
import tempfile
import time


def write_atomic(module, path, text, new_file=False):
    """Write ``text`` over ``path`` (links followed) through a dot-file beside it and an atomic rename.

    The temporary file is synced before the rename, so a reader (the kubelet watching a manifest
    directory, containerd reading its config) sees the old file or the new one, never a part.
    ``new_file``: the file did not exist, it gets mode 0644. ``module`` is the AnsibleModule (its
    atomic_move keeps owner, mode and SELinux context of an existing file).
    """
    real = os.path.realpath(path)
    directory = os.path.dirname(real)
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(real)}.gpusplit-", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        if new_file:
            os.chmod(tmp, 0o644)
        module.atomic_move(tmp, real)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def backup_copy(path, backup_dir):
    """Copy ``path`` into ``backup_dir`` (made 0700) as ``<name>.<UTC stamp>.<pid>.bak``; returns the copy."""
    os.makedirs(backup_dir, mode=0o700, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    backup = os.path.join(backup_dir, f"{os.path.basename(path)}.{stamp}.{os.getpid()}.bak")
    shutil.copy2(path, backup)
    return backup
