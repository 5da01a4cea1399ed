"""The collection as ansible-test sees it: laid out as ansible_collections/gpusplit/k8s, no .collections link.

- `ansible-test sanity --test import` passes for plugins/: module_utils imports only what a managed
  host has (third-party imports guarded), plugin_utils what the controller has;
- the unit tests of the private subpackages run from that layout without the .collections link
  that `make venv` makes (tests/conftest.py finds the tree the checkout sits in).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
GET_PIP = ROOT / "tools" / "ansible_test_get_pip.py"
# a test file that finds files by path: the part of a unit test that the collection layout can break
PATH_READING = re.compile(r"__file__|\.parents?\b|\bROOT\b|REFERENCE|importlib\.resources|files\(")


def _ansible_test_pip_version() -> str:
    from ansible_test._internal import python_requirements as pr

    source = Path(pr.__file__).read_text()
    marker = "pip='"
    start = source.index(marker) + len(marker)
    return source[start : source.index("'", start)]


@pytest.fixture(scope="module")
def laid_out(tmp_path_factory) -> Path:
    """A copy of the tracked files at <tmp>/ansible_collections/gpusplit/k8s."""
    top = tmp_path_factory.mktemp("coll") / "ansible_collections" / "gpusplit" / "k8s"
    top.mkdir(parents=True)
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode()
    for rel in filter(None, files.split("\0")):
        src = ROOT / rel
        if src.is_file():
            dst = top / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
    return top


def test_sanity_import_passes_for_plugins(laid_out):
    # ansible-test bootstraps pip in its virtual environments with a cached script; its usual
    # download location is unreachable here, so the project's own bootstrap is cached instead
    cache = (
        Path.home()
        / ".ansible"
        / "test"
        / "cache"
        / f"get_pip_{_ansible_test_pip_version().replace('.', '_')}.py"
    )
    cache.parent.mkdir(parents=True, exist_ok=True)
    if not cache.is_file() or cache.read_bytes() != GET_PIP.read_bytes():
        shutil.copy2(GET_PIP, cache)
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.pop("ANSIBLE_CONFIG", None)
    run = subprocess.run(
        [
            str(BIN / "ansible-test"),
            "sanity",
            "--test",
            "import",
            "--python",  # the venv's own (each leg of the support matrix runs this under its Python)
            f"{sys.version_info[0]}.{sys.version_info[1]}",
            "--local",
            "plugins/",
        ],
        cwd=laid_out,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]


def path_reading_test_files(top: Path) -> list[str]:
    """The unit test files under plugins/ (not the module tests) that find files by path: the layout
    changes only imports, which collecting every file checks, and paths, which running these checks."""
    return sorted(
        str(path.relative_to(top))
        for path in (top / "tests" / "unit" / "plugins").rglob("test_*.py")
        if "modules" not in path.relative_to(top).parts
        and PATH_READING.search(path.read_text(encoding="utf-8"))
    )


def test_the_path_reading_files_are_found():
    found = path_reading_test_files(ROOT)
    every = {str(p.relative_to(ROOT)) for p in (ROOT / "tests" / "unit" / "plugins").rglob("test_*.py")}
    assert "tests/unit/plugins/plugin_utils/test_split_render.py" in found  # reads the templates by path
    assert set(found) < every and not any("/modules/" in f for f in found)
    left = every - set(found)
    assert any(not PATH_READING.search((ROOT / f).read_text(encoding="utf-8")) for f in left)


def test_unit_tests_run_from_the_collection_layout_without_the_link(laid_out):
    """Every unit test of plugins/ (the tree that mirrors it) is found and imports from the layout
    as ansible-test units would find them; the files among them that find files by path run there
    too (the others' imports are what the layout changes, and collecting them imports them; the
    whole suite runs once, in the main run)."""
    assert not (laid_out / ".collections").exists()
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "ANSIBLE_CONFIG", "ANSIBLE_COLLECTIONS_PATH", "CI")
    }
    reference = os.environ.get("GPUSPLIT_REFERENCE_DIR") or str(ROOT.parent / "shared" / "reference")
    env["GPUSPLIT_REFERENCE_DIR"] = reference
    pytest = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    collect = subprocess.run(
        [*pytest, "--collect-only", "tests/unit/plugins"],
        cwd=laid_out,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert collect.returncode == 0, collect.stdout[-6000:] + collect.stderr[-2000:]
    assert " collected" in collect.stdout or "tests collected" in collect.stdout, collect.stdout[-2000:]
    run = subprocess.run(
        [*pytest, *path_reading_test_files(laid_out)],
        cwd=laid_out,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    assert " passed" in run.stdout and " failed" not in run.stdout
