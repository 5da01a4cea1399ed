"""pip bootstrap for ansible-test's virtual environments, for machines that reach only PyPI.

ansible-test sanity creates empty virtual environments and runs a cached "get-pip" script in
them (~/.ansible/test/cache/get_pip_<version>.py) with pip's install arguments. Its usual
download location is not reachable from the project's machines, so tests/unit/test_collection_layout.py
caches this script under that name instead: it installs the interpreter's bundled pip with ensurepip, then
lets that pip install what ansible-test asked for (e.g. pip==24.2) from the package index.
"""

import subprocess
import sys

# get-pip's own switches: leave these packages out (pip install has no such options)
LEAVE_OUT = {"--no-setuptools": "setuptools", "--no-wheel": "wheel"}


def main(argv):
    # in a child process: ensurepip points PIP_CONFIG_FILE at /dev/null in its own environment,
    # and the pip install below must still read the machine's pip configuration (index, CA)
    subprocess.check_call([sys.executable, "-m", "ensurepip", "--upgrade"])
    args = [a for a in argv if a not in LEAVE_OUT]
    status = subprocess.call([sys.executable, "-m", "pip", "install", *args])
    unwanted = [LEAVE_OUT[a] for a in argv if a in LEAVE_OUT]
    if status == 0 and unwanted:  # ensurepip brings setuptools along on Python <= 3.11
        status = subprocess.call([sys.executable, "-m", "pip", "uninstall", "-y", "-q", *unwanted])
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
