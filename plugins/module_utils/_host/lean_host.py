# Copyright: gpusplit contributors
# Apache-2.0
"""What a host module's work asks of AnsibleModule, from the standard library, for the lean runner.
Private to the collection.

The work of the host modules takes the AnsibleModule as ``module`` and uses four of its methods:
``get_bin_path``, ``run_command``, ``atomic_move`` and ``warn``. Where the work runs through the lean runner
(plugin_utils/lean_module.py, module_utils/_lean/bootstrap.py) there is no AnsibleModule on the host;
:class:`LeanHost` has the same four methods, each doing what AnsibleModule's does for the collection's
callers:

* :func:`find_executable`: PATH, then the sbin folders, as ``get_bin_path``;
* :func:`atomic_move`: an existing file keeps its owner, group, mode and extended attributes (POSIX ACLs
  among them) and gets the time of the move; a new file gets the umask's mode and the effective user as
  owner, with the folder's group where the folder is set-group-ID (as ``atomic_move`` of ansible-core
  2.19 leaves them);
* SELinux labels are the one thing it does not set: where SELinux is on (:func:`selinux_enabled`), a work
  that would create or replace a file raises ``_errors.RunTheModule`` before its first write, and the action
  plugin runs the module, whose AnsibleModule labels a new file with the policy's default and keeps an existing
  file's label (a mode or a removal alone needs no label: the program does those itself).

Standard library only: managed hosts run Python 3.8 to 3.13.
"""

from __future__ import annotations

import errno
import os
import stat
import time

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import RunTheModule

# where ansible-core's get_bin_path also looks, after PATH
SBIN_DIRS = ("/sbin", "/usr/sbin", "/usr/local/sbin")
MOUNTS = "/proc/self/mounts"


def is_executable(path):
    """Whether ``path`` is a file this process may run."""
    return os.path.isfile(path) and os.access(path, os.X_OK)


def find_executable(name, path=None):
    """The first executable file ``name`` in PATH (``path``, or the environment's) and then the sbin
    folders, as ansible-core's ``get_bin_path`` looks for it; None when there is none."""
    dirs = [d for d in (os.environ.get("PATH", "") if path is None else path).split(os.pathsep) if d]
    dirs += [d for d in SBIN_DIRS if d not in dirs]
    for folder in dirs:
        candidate = os.path.join(folder, name)
        if is_executable(candidate):
            return candidate
    return None


def selinux_enabled(mounts=None):
    """Whether SELinux may label this host's files: its file system (selinuxfs) is mounted, or the mount
    table cannot be read (then the module, which can tell, decides)."""
    try:
        with open(mounts or MOUNTS, encoding="utf-8", errors="replace") as handle:
            table = handle.read()
    except OSError:
        return True
    return any(len(fields) > 2 and fields[2] == "selinuxfs" for fields in map(str.split, table.splitlines()))


def _current_umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_move(src, dest):
    """Rename ``src`` over ``dest`` (same folder, so the rename is atomic).

    An existing ``dest`` lends ``src`` its owner and group (where this process may set them), its mode and
    its extended attributes, and ``src`` gets the present time. A new ``dest`` gets mode 0666 less the
    umask, the effective user, and the folder's group where the folder is set-group-ID, else the effective
    group (where this process may set them). OSError where the rename fails.
    """
    import shutil  # here: only a replaced file needs it

    creating = not os.path.exists(dest)
    if not creating:
        try:
            info = os.stat(dest)
            os.chown(src, info.st_uid, info.st_gid)
            shutil.copystat(dest, src)
            now = time.time()
            os.utime(src, times=(now, now))
        except OSError as exc:
            if exc.errno != errno.EPERM:
                raise
    os.rename(src, dest)
    if creating:
        os.chmod(dest, 0o666 & ~_current_umask())
        folder = os.stat(os.path.dirname(os.path.abspath(dest)))
        group = folder.st_gid if folder.st_mode & stat.S_ISGID else os.getegid()
        try:
            os.chown(dest, os.geteuid(), group)
        except OSError:  # (not root: the file stays as the rename left it)
            pass


class LeanHost:
    """The AnsibleModule methods a host module's work calls, for the lean runner; ``warnings`` collects what
    ``warn`` was given, for the result."""

    def __init__(self):
        self.warnings = []

    def get_bin_path(self, name):
        return find_executable(name)

    def run_command(self, args, handle_exceptions=False):
        """``(rc, stdout, stderr)`` of ``args`` (a list, no shell); OSError where it cannot start (as
        AnsibleModule's with ``handle_exceptions=False``, the one way the collection calls it)."""
        import subprocess  # here: only a command needs it

        done = subprocess.run(args, capture_output=True, check=False)
        return (
            done.returncode,
            done.stdout.decode("utf-8", "replace"),
            done.stderr.decode("utf-8", "replace"),
        )

    def atomic_move(self, src, dest):
        atomic_move(src, dest)

    def selinux_enabled(self):
        return selinux_enabled()

    def ready_to_write(self):
        """Before the work's first write: RunTheModule where SELinux would want labels on the files."""
        if self.selinux_enabled():
            raise RunTheModule(
                "SELinux is enabled on this host (or its mount table cannot be read): the module writes the files,"
                " with their labels"
            )

    def warn(self, text):
        if text not in self.warnings:
            self.warnings.append(text)
