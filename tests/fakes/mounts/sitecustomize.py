"""Stand-in for the kernel's mount table, for the lean runner's tests: with this folder on PYTHONPATH, a
Python that opens /proc/self/mounts reads the file $GPUSPLIT_TEST_MOUNTS instead (a table with or without
selinuxfs), so that a test can show a host where SELinux is on, which this machine cannot be."""

import builtins
import os

_open = builtins.open
_TABLE = os.environ.get("GPUSPLIT_TEST_MOUNTS")


def _open_mounts(file, *args, **kwargs):
    if _TABLE and file == "/proc/self/mounts":
        file = _TABLE
    return _open(file, *args, **kwargs)


builtins.open = _open_mounts
