"""tools/multi_python_tests.py: which Pythons it finds and which it misses (a failure in CI), the legs and
their managed-host Pythons it reads from pyproject.toml, what it runs where, and the compile check of
plugins/module_utils and plugins/modules with every Python 3.8-3.13 on this machine."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.gpusplit.k8s.tests.unit.tool_module import load_tool

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "multi_python_tests.py"


mpt = load_tool("multi_python_tests")


def fake_python(path: Path, script: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + script + "\n")
    path.chmod(0o755)
    return path


def test_discovery_uses_pyenv_then_path_and_says_why_it_skips(tmp_path):
    pyenv = tmp_path / "pyenv"
    good = fake_python(pyenv / "versions" / "3.9.99" / "bin" / "python3.9", "echo 3.9.99")
    fake_python(pyenv / "versions" / "3.10.1" / "bin" / "python3.10", "echo 'broken install' >&2; exit 1")
    path_dir = tmp_path / "bin"
    fake_python(path_dir / "python3.12", "echo 3.11.0")  # a python3.12 that is not 3.12
    on_path = fake_python(path_dir / "python3.13", "echo 3.13.5")

    found, skipped = mpt.discover(((3, 9), (3, 10), (3, 12), (3, 13), (3, 8)), str(pyenv), str(path_dir))

    assert found == {(3, 9): (str(good), (3, 9, 99)), (3, 13): (str(on_path), (3, 13, 5))}
    assert skipped[(3, 10)].endswith("python3.10 does not run: broken install")
    assert skipped[(3, 12)] == f"{path_dir / 'python3.12'} is Python 3.11.0"
    assert skipped[(3, 8)] == "no python3.8 in pyenv versions or PATH"


def test_controller_only_test_files_are_left_out_below_the_legs_controller(tmp_path):
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test_host.py").write_text(
        "from ansible.module_utils.testing import patch_module_args\n"
        "from ansible_collections.gpusplit.k8s.plugins.module_utils._host import files\n"
    )
    (tests / "test_filter.py").write_text(
        "import pytest\nfrom ansible.errors import AnsibleFilterError\n"
        "from ansible_collections.gpusplit.k8s.plugins.filter import control_plane_gates\n"
    )
    (tests / "test_lab.py").write_text("def test_x():\n    from lab import components\n")

    run, left_out = mpt.split_tests((3, 11), (3, 12), ("tests",), tmp_path)
    assert run == [tests / "test_host.py"]
    assert left_out[tests / "test_filter.py"] == (
        "imports controller-only ansible.errors, ansible_collections.gpusplit.k8s.plugins.filter "
        "(this leg's controller needs 3.12+)"
    )
    assert "lab" in left_out[tests / "test_lab.py"]
    run, left_out = mpt.split_tests((3, 12), (3, 12), ("tests",), tmp_path)
    assert len(run) == 3 and left_out == {}


def test_legs_come_from_the_support_matrix_with_their_own_host_pythons():
    import tomllib

    legs, pins = mpt.load()
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert [leg["name"] for leg in legs] == [leg["name"] for leg in data["tool"]["gpusplit"]["legs"]]
    for leg, source in zip(legs, data["tool"]["gpusplit"]["legs"], strict=True):
        assert leg["hosts"] == tuple(sorted(mpt._minor_of(v) for v in source["host_python"]))
        assert leg["core"] in source["pins"]
        assert leg["pins"]["pytest"] == pins["pytest"]
    by_core = {leg["core"]: leg for leg in legs}
    # ansible-core 2.19 still runs modules under Python 3.8; 2.20 and later refuse it (_PY_MIN)
    assert (3, 8) in by_core["ansible-core==2.19.14"]["hosts"]
    assert all(
        min(leg["hosts"]) == (3, 9) for core, leg in by_core.items() if core != "ansible-core==2.19.14"
    )
    from ansible.release import __version__

    assert mpt.host_minors() == by_core[f"ansible-core=={__version__}"]["hosts"]


def test_a_missing_python_fails_in_ci_and_is_named_elsewhere():
    legs = [{"name": "old", "hosts": ((3, 8), (3, 9))}, {"name": "new", "hosts": ((3, 9),)}]
    skipped = {(3, 8): "no python3.8 in pyenv versions or PATH"}
    lines, failures = mpt.missing_lines(legs, skipped, ci=True)
    assert failures == ["old on Python 3.8: no such Python here"]
    assert lines == ["  FAILED (CI=true): old on Python 3.8: no python3.8 in pyenv versions or PATH"]
    lines, failures = mpt.missing_lines(legs, skipped, ci=False)
    assert failures == [] and lines[0].startswith("  SKIPPED, NOT PROVEN HERE: old on Python 3.8: ")
    assert mpt.in_ci({"CI": "true"}) and not mpt.in_ci({})


def test_ci_run_fails_when_a_legs_python_is_missing(tmp_path):
    """The whole tool, in CI, on a machine without the Pythons: a named failure, never a skip."""
    env = {
        **os.environ,
        "CI": "true",
        "PATH": str(tmp_path),  # no python3.X here
        "PYENV_ROOT": str(tmp_path / "no-pyenv"),
        "HOME": str(tmp_path),
    }
    done = subprocess.run(
        [sys.executable, str(TOOL), "--list", "--legs", "core2.19", "--pythons", "3.8"],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
        env=env,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "FAILED (CI=true): core2.19 on Python 3.8: no python3.8 in pyenv versions or PATH" in done.stdout


def test_compile_check_names_the_file_and_line(tmp_path):
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "good.py").write_text("x = 1\n")
    (tmp_path / "plugins" / "bad.py").write_text("x = 1\ndef f(:\n")
    count, errors = mpt.compile_check(sys.executable, ("plugins",), tmp_path)
    assert count == 2
    assert len(errors) == 1 and errors[0].startswith(f"{tmp_path / 'plugins' / 'bad.py'}:2: ")


def test_requirements_follow_the_legs_pins():
    legs, pins = mpt.load()
    old_core = next(leg for leg in legs if leg["name"] == "core2.19")
    old = mpt.requirements((3, 8), old_core)
    assert old[0] == "pytest==8.3.5" and pins["PyYAML"] in old and not any("ansible" in r for r in old)
    for leg in legs:
        assert mpt.requirements((3, 12), leg)[0] == pins["pytest"]
        assert mpt.requirements((3, 12), leg)[-1] == leg["core"]
        assert not any("ansible" in r for r in mpt.requirements((3, 11), leg))


def test_test_paths_exist_and_cover_the_managed_host_modules():
    for rel in mpt.TEST_PATHS:
        assert (ROOT / rel).exists(), rel
    names = " ".join(str(p) for p in mpt.test_files())
    for needed in (
        "test_toolkit_config",
        "test_toml_read",
        "test_deadline",
        "test_static_pod",
        "test_kubeadm",
    ):
        assert needed in names


def test_list_mode_names_the_pythons_used_and_skipped():
    done = subprocess.run(
        [sys.executable, str(TOOL), "--list"], capture_output=True, text=True, check=False, cwd=ROOT
    )
    assert done.returncode in (0, 1), done.stderr
    assert done.stdout.startswith("Pythons used:\n")
    assert "Pythons missing:" in done.stdout
    assert "== leg core2.19 (ansible-core==2.19.14): managed-host Pythons 3.8, " in done.stdout
    assert f"{sys.version_info[0]}.{sys.version_info[1]}" in done.stdout


FOUND, _SKIPPED = mpt.discover()


@pytest.mark.parametrize(
    "minor",
    sorted(FOUND) or [tuple(sys.version_info[:2])],
    ids=lambda m: f"python{m[0]}.{m[1]}",
)
def test_module_files_compile_with_every_python_found(minor):
    executable = FOUND[minor][0] if minor in FOUND else sys.executable
    count, errors = mpt.compile_check(executable)
    assert count > 50
    assert errors == [], errors


def test_host_module_utils_is_the_legs_own(tmp_path, monkeypatch):
    """Below the leg's controller Pythons, ansible.module_utils is the leg's ansible-core's (from the
    package index, unpacked once): the managed-host floor of that core (_PY_MIN) is what runs."""
    monkeypatch.setenv("GPUSPLIT_PYENVS_DIR", str(tmp_path))
    legs, _ = mpt.load()
    leg = next(leg for leg in legs if leg["name"] == "core2.19")
    lib = mpt.host_module_utils(leg)
    assert (lib / "ansible" / "__init__.py").read_text() == ""
    basic = (lib / "ansible" / "module_utils" / "basic.py").read_text()
    assert "_PY_MIN = (3, 8)" in basic
    assert (tmp_path / "core2.19" / "ansible-core" / ".gpusplit-core").read_text() == leg["core"]
    assert mpt.host_module_utils(leg) == lib  # reused


def test_the_python_a_leg_runs_its_own_tests_under_is_not_run_twice(tmp_path):
    legs, _ = mpt.load()
    other = next(leg for leg in legs if not leg["default"])
    assert mpt.leg_controller(other, tmp_path) is None  # no venv: every host Python runs here
    venv = tmp_path / f".venv-{other['name']}"
    venv.mkdir()
    (venv / ".gpusplit-leg.json").write_text('{"python": "/x/python3.12", "version": "3.12.7"}')
    assert mpt.leg_controller(other, tmp_path) == (3, 12)
    default = next(leg for leg in legs if leg["default"])
    assert mpt.leg_controller(default, tmp_path) is None  # not running from tmp_path/.venv
    if Path(sys.prefix).resolve() == (ROOT / ".venv").resolve():
        assert mpt.leg_controller(default) == tuple(sys.version_info[:2])


def test_make_tests_edges_keep_each_legs_bounds():
    legs, _pins = mpt.load()
    for leg in legs:
        kept = mpt.edges(leg)["hosts"]
        assert kept == (min(leg["hosts"]), max(leg["hosts"])) and len(leg["hosts"]) > 2
    # 3.8 stays proven on the leg that supports it
    (old,) = [leg for leg in legs if (3, 8) in leg["hosts"]]
    assert (3, 8) in mpt.edges(old)["hosts"]
