"""Run `ansible-test sanity` on the collection, the way Galaxy and Automation Hub see it.

ansible-test needs the collection at .../ansible_collections/<namespace>/<name>. By default this
script builds the tarball (tools/dist.py) and unpacks it at <tmp>/ansible_collections/gpusplit/k8s,
so sanity checks exactly what ships (tests/sanity/ignore-<core>.txt included: ansible-test reads the
one of its own ansible-core version, e.g. ignore-2.21.txt). With --checkout it checks every file of
the checkout instead (lab, tools and the pytest suites too; ruff lints those in `make lint`). Then
it runs `ansible-test sanity --python X.Y --local` there, X.Y being the Python this script runs
under (the venv's: each leg of the support matrix runs it with its own venv, tools/legs.py), with
any further arguments (`--test pep8`, a path, ...; `--python` given there wins). ansible-test's pip bootstrap is cached from
tools/ansible_test_get_pip.py first (its usual download location is not reachable from the
project's machines).

    python tools/sanity.py                   # every sanity test, on the tarball's files
    python tools/sanity.py --test pylint     # one test
    python tools/sanity.py --checkout ...    # on the checkout's files
    python tools/sanity.py --keep DIR ...    # lay out under DIR and leave it there
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from collection_tree import NAME, NAMESPACE, ROOT, lay_out
from dist import build

BIN = Path(sys.executable).parent
GET_PIP = ROOT / "tools" / "ansible_test_get_pip.py"


def ansible_test_pip_version() -> str:
    """The pip version ansible-test bootstraps its virtual environments with (e.g. 24.2)."""
    from ansible_test._internal import python_requirements as pr

    source = Path(pr.__file__).read_text()
    marker = "pip='"
    start = source.index(marker) + len(marker)
    return source[start : source.index("'", start)]


def cache_get_pip() -> None:
    """Cache the project's pip bootstrap under the name ansible-test looks for."""
    version = ansible_test_pip_version().replace(".", "_")
    cache = Path.home() / ".ansible" / "test" / "cache" / f"get_pip_{version}.py"
    cache.parent.mkdir(parents=True, exist_ok=True)
    if not cache.is_file() or cache.read_bytes() != GET_PIP.read_bytes():
        shutil.copy2(GET_PIP, cache)


def unpack_tarball(top: Path) -> Path:
    """Build the tarball and unpack it at <top>/ansible_collections/gpusplit/k8s."""
    dest = top / "ansible_collections" / NAMESPACE / NAME
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    with tempfile.TemporaryDirectory(prefix="gpusplit-sanity-dist-") as out:
        with tarfile.open(build(Path(out))) as tf:
            tf.extractall(dest, filter="data")
    return dest


def run(args: list[str], keep: str | None, checkout: bool) -> int:
    cache_get_pip()
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    for name in ("ANSIBLE_CONFIG", "ANSIBLE_COLLECTIONS_PATH", "PYTHONPATH"):
        env.pop(name, None)
    python = [] if "--python" in args else ["--python", f"{sys.version_info[0]}.{sys.version_info[1]}"]
    command = [str(BIN / "ansible-test"), "sanity", *python, "--local", "--color", "no", *args]
    place = lay_out if checkout else unpack_tarball
    if keep:
        top = Path(keep).resolve()
        top.mkdir(parents=True, exist_ok=True)
        return subprocess.call(command, cwd=place(top), env=env)
    with tempfile.TemporaryDirectory(prefix="gpusplit-sanity-") as tmp:
        return subprocess.call(command, cwd=place(Path(tmp)), env=env)


def main(argv: list[str]) -> int:
    keep, checkout = None, False
    while argv[:1] in (["--keep"], ["--checkout"]):
        if argv[0] == "--checkout":
            checkout, argv = True, argv[1:]
        elif len(argv) < 2:
            print("--keep needs a directory", file=sys.stderr)
            return 2
        else:
            keep, argv = argv[1], argv[2:]
    return run(argv, keep, checkout)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
