# Copyright: gpusplit contributors
# Apache-2.0
"""Reading, backing up and writing a file on a host, one way for every module. Private to the collection."""

from __future__ import annotations

import os
import shutil
import tempfile
import time

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError, type_name


def os_reason(exc):
    """What the operating system said about a file (``No such file or directory``), in its words."""
    return exc.strerror or str(exc) or type_name(exc)


def read_text(path, name=None, error=GpusplitError):
    """The UTF-8 text of the file ``path``, line endings as they are: the one file reader of the
    collection (host modules, control-plane modules, the controller's manifest lint).

    Refuses with ``error`` (a :class:`GpusplitError` subclass), naming ``name`` (by default
    ``path``): a path that exists but is no regular file, a file that cannot be read (the operating
    system's words: missing, no permission) and one that is not UTF-8 (the first bad byte, its line
    and column), never with Python's own exception text.
    """
    name = name or path
    if os.path.exists(path) and not os.path.isfile(path):
        raise error(f"{name} is not a regular file")
    try:
        with open(path, "rb") as handle:
            raw = handle.read()
    except OSError as exc:
        raise error(f"cannot read {name}: {os_reason(exc)}") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise error(
            f"{name} is not UTF-8 text: byte 0x{raw[exc.start]:02x} on line {line}, column {column} is no "
            "UTF-8 character; save the file as UTF-8"
        ) from None


def is_inside(child, parent):
    """Whether ``child`` is ``parent`` or lies below it, links resolved."""
    child = os.path.realpath(child)
    parent = os.path.realpath(parent)
    return child == parent or child.startswith(parent.rstrip(os.sep) + os.sep)


def write_atomic(module, path, text, new_file=False, mode=None):
    """Write ``text`` over ``path`` (links followed) through a dot-file beside it and an atomic rename.

    The temporary file is synced before the rename, so a reader (the kubelet watching a manifest
    directory, containerd reading its config) sees the old file or the new one, never a part.
    ``new_file``: the file did not exist, it gets mode 0644, or ``mode`` when given (set after the
    rename, where atomic_move gives a new file the umask's mode). ``module`` is the AnsibleModule
    (its atomic_move keeps owner, mode and SELinux context of an existing file).
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
        move(module, tmp, real)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    if new_file and mode is not None:
        os.chmod(real, mode)


def move(module, src, dest):
    """``module.atomic_move(src, dest)``; OSError where it fails. ansible-core 2.19's raises a plain Exception
    (its cause the OSError) where its own workaround for a rename that fails did not help either: an OSError
    again here, with the operating system's words, so that every caller says which file it could not write."""
    try:
        module.atomic_move(src, dest)
    except OSError:
        raise
    except Exception as exc:
        cause = exc.__cause__
        if isinstance(cause, OSError):
            raise OSError(cause.errno, os_reason(cause), dest) from exc
        raise OSError(None, str(exc), dest) from exc


def file_diff(before, after, before_header, after_header=None):
    """The ``diff`` of a file a module edits, as ``--diff`` shows it (``after_header``: as before)."""
    return {
        "before": before,
        "after": after,
        "before_header": before_header,
        "after_header": before_header if after_header is None else after_header,
    }


def backup_copy(path, backup_dir):
    """Copy ``path`` into ``backup_dir`` (made 0700) as ``<name>.<UTC stamp>.<pid>.bak``; returns the copy."""
    os.makedirs(backup_dir, mode=0o700, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    backup = os.path.join(backup_dir, f"{os.path.basename(path)}.{stamp}.{os.getpid()}.bak")
    shutil.copy2(path, backup)
    return backup


def backup_name(path, now=None):
    """``<path>.gpusplit-<UTC timestamp>.bak`` beside the file; never an existing file."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    candidate = f"{path}.gpusplit-{stamp}.bak"
    n = 1
    while os.path.lexists(candidate):
        candidate = f"{path}.gpusplit-{stamp}.{n}.bak"
        n += 1
    return candidate


def backup_beside(path):
    """Copy ``path`` (with its mode and times) to :func:`backup_name` beside it; returns the copy."""
    backup = backup_name(path)
    shutil.copy2(path, backup)
    return backup
