"""tools/multi_python_tests.py: which Pythons it finds and skips, what it runs where, and the compile check
of plugins/module_utils and plugins/modules with every Python 3.8-3.13 on this machine."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "multi_python_tests.py"


def load_tool():
    spec = importlib.util.spec_from_file_location("gpusplit_multi_python_tests", TOOL)
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    return tool


mpt = load_tool()


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


def test_controller_only_test_files_are_left_out_below_311(tmp_path):
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

    run, left_out = mpt.split_tests((3, 9), ("tests",), tmp_path)
    assert run == [tests / "test_host.py"]
    assert left_out[tests / "test_filter.py"] == (
        "imports controller-only ansible.errors, ansible_collections.gpusplit.k8s.plugins.filter "
        "(ansible-core 2.19 needs 3.11+)"
    )
    assert "lab" in left_out[tests / "test_lab.py"]
    run, left_out = mpt.split_tests((3, 11), ("tests",), tmp_path)
    assert len(run) == 3 and left_out == {}


def test_compile_check_names_the_file_and_line(tmp_path):
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "good.py").write_text("x = 1\n")
    (tmp_path / "plugins" / "bad.py").write_text("x = 1\ndef f(:\n")
    count, errors = mpt.compile_check(sys.executable, ("plugins",), tmp_path)
    assert count == 2
    assert len(errors) == 1 and errors[0].startswith(f"{tmp_path / 'plugins' / 'bad.py'}:2: ")


def test_requirements_follow_the_project_pins():
    pins = mpt.project_pins()
    assert {"pytest", "PyYAML", "nvidia-ml-py", "ansible-core"} <= set(pins)
    old = mpt.requirements((3, 8), pins)
    assert old[0] == "pytest==8.3.5" and pins["PyYAML"] in old and not any("ansible" in r for r in old)
    assert mpt.requirements((3, 12), pins)[0] == pins["pytest"]
    assert pins["ansible-core"] in mpt.requirements((3, 12), pins)


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
    assert "Pythons skipped:" in done.stdout
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


def test_host_module_utils_is_the_controllers(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUSPLIT_PYENVS_DIR", str(tmp_path))
    import ansible.module_utils

    lib = mpt.host_module_utils()
    assert (lib / "ansible" / "__init__.py").read_text() == ""
    assert os.path.realpath(lib / "ansible" / "module_utils") == os.path.realpath(
        Path(ansible.module_utils.__file__).parent
    )
