# Copyright: gpusplit contributors
# Apache-2.0
"""Reading, backing up and writing a file on a host, one way for every module. Private to the collection.

Two rules hold for every module that writes a file:

* links: a module never writes through a symbolic link to another file unless its option says so
  (``follow``): :func:`write_atomic` refuses a link otherwise (:class:`LinkRefused`), and with ``follow``
  replaces the link's target, whose mode and owner are kept. Whether a file lies in a directory some
  daemon reads (the kubelet's manifest directory) is decided from the directory the path itself names,
  not from a link's target: the daemon reads the link's directory (:func:`own_directory`);
* backups: :func:`backup_file` is the one backup routine. The copy is written to a temporary dot-file
  beside its final name, synced, given the original's mode, times and owner, then renamed, so that a full
  disk or a kill leaves no partial ``.bak``; :func:`write_with_backup` removes the backup again when the
  write it was made for is refused, so that no backup stands for a change that did not happen.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
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


class LinkRefused(GpusplitError):
    """A write that would go through a symbolic link to another file, which the module's option did not allow."""


def own_directory(path):
    """The directory ``path`` names, as a daemon that lists it sees it: a link's own directory, not its target's."""
    return os.path.dirname(os.path.abspath(path))


def check_link(path, option="follow"):
    """Refuse (:class:`LinkRefused`) when ``path`` is a symbolic link: writing it would change another file.
    ``option``: the module's option that allows it, named in the message (None: the module has none)."""
    if os.path.islink(path):
        allow = (
            f", or set {option}: true to write the link's target, whose mode and owner are kept"
            if option
            else ""
        )
        raise LinkRefused(
            f"{path} is a symbolic link to {os.path.realpath(path)}: refusing to write through it to another file "
            f"(replace the link with the file itself{allow})"
        )


def write_atomic(module, path, text, new_file=False, mode=None, follow=False, option="follow"):
    """Write ``text`` over ``path`` through a dot-file beside it and an atomic rename.

    A symbolic link is refused (:func:`check_link`, naming ``option``) unless ``follow``: then its target is
    replaced, its mode and owner kept. The temporary file is synced before the rename, so a reader (the
    kubelet watching a manifest directory, containerd reading its config) sees the old file or the new
    one, never a part. ``new_file``: the file did not exist, it gets mode 0644, or ``mode`` when given (set
    after the rename, where atomic_move gives a new file the umask's mode). ``module`` is the
    AnsibleModule (its atomic_move keeps owner, mode and SELinux context of an existing file).
    """
    if not follow:
        check_link(path, option)
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


def backup_file(path, backup):
    """Copy the file ``path`` (a link's target) to the new file ``backup``: the one backup routine.

    Written to a temporary dot-file in ``backup``'s directory, synced, given ``path``'s mode, times and
    owner (where the user the module runs as may set it), then renamed to ``backup`` and the directory
    synced: a full disk or a kill leaves no partial backup under the final name, and a backup of another
    user's file stays that user's. OSError where it cannot be made (nothing is left behind then)."""
    directory = os.path.dirname(os.path.abspath(backup))
    info = os.stat(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(backup)}.", dir=directory)
    try:
        with os.fdopen(fd, "wb") as out, open(path, "rb") as source:
            shutil.copyfileobj(source, out)
            out.flush()
            os.fsync(out.fileno())
        shutil.copystat(path, tmp)
        if (info.st_uid, info.st_gid) != (os.geteuid(), os.getegid()):
            try:
                os.chown(tmp, info.st_uid, info.st_gid)
            except PermissionError:
                pass  # not root: the backup is the user's own, readable only as the mode allows
            os.chmod(tmp, stat.S_IMODE(info.st_mode))
        os.rename(tmp, backup)
    except BaseException:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        raise
    _sync_directory(directory)
    return backup


def _sync_directory(directory):
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.EBADF):
            raise
    finally:
        os.close(fd)


def backup_copy(path, backup_dir):
    """Copy ``path`` into ``backup_dir`` (made 0700) as ``<name>.<UTC stamp>.<pid>.bak`` (:func:`backup_file`);
    returns the copy."""
    os.makedirs(backup_dir, mode=0o700, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    backup = os.path.join(backup_dir, f"{os.path.basename(path)}.{stamp}.{os.getpid()}.bak")
    n = 1
    while os.path.lexists(backup):
        backup = os.path.join(backup_dir, f"{os.path.basename(path)}.{stamp}.{os.getpid()}.{n}.bak")
        n += 1
    return backup_file(path, backup)


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
    """Copy ``path`` (a link: its target's content, beside the link) to :func:`backup_name` beside it
    (:func:`backup_file`); returns the copy."""
    return backup_file(path, backup_name(path))


def write_with_backup(
    module, path, text, backup=None, new_file=False, mode=None, follow=False, option="follow"
):
    """:func:`write_atomic`, after a backup of the file as it was: ``backup`` is None (none), ``"beside"``
    (:func:`backup_beside`) or a directory (:func:`backup_copy`). The link rule is checked before the backup is
    made, and the backup is removed again when the write is refused: no backup stands for a change that did not
    happen. Returns the backup's path (None without one)."""
    if not follow:
        check_link(path, option)
    made = None
    if backup is not None and not new_file:
        made = backup_beside(path) if backup == "beside" else backup_copy(path, backup)
    try:
        write_atomic(module, path, text, new_file=new_file, mode=mode, follow=follow, option=option)
    except BaseException:
        if made is not None and os.path.lexists(made):
            os.unlink(made)
        raise
    return made
