"""Stand-in for ``python -m pip install nvidia-ml-py==<version>``; standard library only.

Put tests/fakes/pip_standin on the sys.path of a Python (a ``.pth`` file in a virtual environment made
``--without-pip``), and ``<that python> -m pip ...`` appends its arguments as one JSON line to
``<sys.prefix>/pip-calls.log`` and, for ``install nvidia-ml-py==...``, "installs" the fake NVML binding
(tests/fakes/pynvml.py, which reads GPUSPLIT_FAKE_NVML_FIXTURE) into that Python's site-packages and
prints pip's "Successfully installed" line. ``freeze`` (what ansible.builtin.pip runs in check mode) lists
the installed packages, that binding where it was "installed". Nothing is downloaded. Anything else exits 2,
like pip with an unknown command.
"""

import json
import os
import shutil
import sys
import sysconfig

FAKES = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FAKE_BINDING = os.path.join(FAKES, "pynvml.py")


def main(argv):
    with open(os.path.join(sys.prefix, "pip-calls.log"), "a", encoding="utf-8") as log:
        log.write(json.dumps(argv) + "\n")
    if argv[:1] == ["freeze"]:
        installed = os.path.exists(os.path.join(sysconfig.get_paths()["purelib"], "pynvml.py"))
        sys.stdout.write("nvidia-ml-py==0\n" if installed else "")
        return 0
    wanted = [arg for arg in argv[1:] if not arg.startswith("-")]
    if not argv or argv[0] != "install" or len(wanted) != 1 or not wanted[0].startswith("nvidia-ml-py=="):
        sys.stderr.write(f"ERROR: the pip stand-in only installs nvidia-ml-py==<version>, got {argv}\n")
        return 2
    version = wanted[0].split("==", 1)[1]
    shutil.copy(FAKE_BINDING, os.path.join(sysconfig.get_paths()["purelib"], "pynvml.py"))
    sys.stdout.write(f"Successfully installed nvidia-ml-py-{version}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
