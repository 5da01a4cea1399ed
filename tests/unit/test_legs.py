"""tools/legs.py: a leg that cannot run is a named failure, what each leg runs, how its output is counted."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from ansible_collections.gpusplit.k8s.tests.unit.tool_module import load_tool

ROOT = Path(__file__).resolve().parents[2]


legs = load_tool("legs")
DATA = legs.load()
OLD = {
    "name": "old",
    "pins": ["ansible==1.0.0", "ansible-core==2.1.0"],
    "controller_python": ["3.99"],
    "host_python": ["3.99"],
    "default": False,
    "lab": True,
}


def test_a_leg_without_its_python_is_a_named_failure(tmp_path):
    with pytest.raises(legs.LegError, match=r"^leg old: no usable Python 3\.99 found"):
        legs.ensure_venv(OLD, {"dependencies": ["ansible==9", "ansible-core==9"]}, root=tmp_path)
    said = []
    data = {"legs": [OLD], "matrix": {}, "dependencies": ["ansible==9", "ansible-core==9"]}
    assert legs.run_legs(data, [OLD], "test", "0", log=said.append) == 1
    assert said[0].startswith("[old] FAILED: cannot run: leg old: no usable Python 3.99 found")
    assert said[-1] == "FAILED: old cannot run"


def test_the_default_legs_venv_missing_is_a_named_failure(tmp_path):
    default = next(leg for leg in DATA["legs"] if leg["default"])
    with pytest.raises(legs.LegError, match=r"\.venv is missing \(make venv builds it\)"):
        legs.ensure_venv(default, DATA, root=tmp_path)


def test_a_built_venv_is_reused_while_its_stamp_holds(tmp_path, monkeypatch):
    leg = dict(OLD, controller_python=[f"{sys.version_info[0]}.{sys.version_info[1]}"])
    data = {"dependencies": ["ansible==9", "ansible-core==9", "pytest==8"]}
    monkeypatch.setattr(legs, "find_python", lambda _leg: sys.executable)
    home = legs.venv_dir(leg, tmp_path)
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "python").symlink_to(sys.executable)
    stamp = {
        "python": sys.executable,
        "version": legs.python_version(sys.executable),
        "requirements": ["ansible==1.0.0", "ansible-core==2.1.0", "pytest==8"],
    }
    (home / ".gpusplit-leg.json").write_text(json.dumps(stamp))
    assert legs.ensure_venv(leg, data, root=tmp_path, log=pytest.fail) == home / "bin" / "python"
    assert home.name == ".venv-old"


def test_requirements_swap_only_the_two_pins():
    deps = ["ansible==14.5.0", "ansible-core==2.21.5", "pytest==8.4.2", "ansible-lint==26.10.1"]
    assert legs.requirements(OLD, deps) == ["ansible==1.0.0", "ansible-core==2.1.0", "pytest==8.4.2", deps[3]]
    with pytest.raises(ValueError, match="lacks"):
        legs.requirements(OLD, ["pytest==8.4.2"])


def test_what_each_leg_runs(tmp_path):
    python = tmp_path / "bin" / "python"
    lab_leg = dict(OLD)
    plain = dict(OLD, lab=False)
    names = [part for part, _argv, _counts in legs.parts(lab_leg, python, "test", "2")]
    assert names == ["unit", "sanity", "lab"]
    unit, sanity, lab = (argv for _part, argv, _counts in legs.parts(lab_leg, python, "test", "2"))
    files = legs.version_sensitive_tests()
    assert unit[0] == str(python) and unit[-len(files) - 2 :] == ["-m", "not integration", *files]
    assert ["--numprocesses", "2"] == unit[unit.index("--numprocesses") : unit.index("--numprocesses") + 2]
    # sanity runs under the leg's own Python, which tools/sanity.py passes on as --python
    assert sanity == [str(python), str(ROOT / "tools" / "sanity.py")]
    assert lab[-2:] == list(legs.LAB_TESTS)
    assert [part for part, *_ in legs.parts(plain, python, "test", "0")] == ["unit", "sanity"]
    assert "--numprocesses" not in legs.parts(plain, python, "test", "0")[0][1]
    whole = legs.parts(plain, python, "matrix", "2")
    assert [part for part, *_ in whole] == ["pytest", "sanity"] and whole[0][1][-1] == "tests"
    for rel in legs.LAB_TESTS:
        assert (ROOT / rel).is_file(), rel


def test_make_test_runs_the_unit_files_that_reach_ansible_core_on_the_other_legs(tmp_path):
    files = legs.version_sensitive_tests()
    # a module run, a playbook run, the check of private ansible-core API, a filter: each reaches ansible-core
    for reached in (
        "tests/unit/plugins/modules/test_nvidia_gpu_facts.py",
        "tests/unit/plugins/modules/test_nvidia_gpu_facts_writes_nothing.py",
        "tests/unit/test_public_api.py",
        "tests/unit/plugins/module_utils/_gpu/test_deadline.py",
    ):
        assert reached in files, reached
    # the planner's own logic: no ansible-core version changes it
    assert "tests/unit/plugins/module_utils/_split/test_planner.py" not in files
    unit = tmp_path / "tests" / "unit"
    unit.mkdir(parents=True)
    (unit / "test_plain.py").write_text("def test_x():\n    assert 1\n")
    (unit / "test_core.py").write_text("from ansible.module_utils.basic import AnsibleModule\n")
    assert legs.version_sensitive_tests(tmp_path) == ["tests/unit/test_core.py"]


def test_counts_are_read_off_pytest_and_ansible_test():
    out = "....\n=========== 3170 passed, 2 skipped, 3 xfailed in 250.10s (0:04:10) ===========\n"
    assert legs.pytest_counts(out) == "3170 passed, 2 skipped, 3 xfailed in 250.10s (0:04:10)"
    sanity = 'Running sanity test "pep8"\nRunning sanity test "pylint"\n'
    assert legs.sanity_counts(sanity) == "2 sanity tests ran"
    failed = (
        sanity
        + "FATAL: The 1 sanity test(s) listed below (out of 24) failed. See error output above.\npylint\n"
    )
    assert legs.sanity_counts(failed) == "24 sanity tests, 1 failed"


def fake_collection(home: Path, version: str) -> Path:
    path = home / "lib" / "python3.12" / "site-packages" / "ansible_collections" / "kubernetes" / "core"
    path.mkdir(parents=True)
    (path / "MANIFEST.json").write_text(json.dumps({"collection_info": {"version": version}}))
    (path / "plugins").mkdir()
    (path / "plugins" / "helm.py").write_text(f"# {version}\n")
    return path


def test_galaxy_ymls_floors_are_read():
    assert legs.collection_floors(ROOT) == {"kubernetes.core": "6.4.0"}


def test_a_leg_whose_ansible_bundles_an_older_collection_gets_the_default_legs(tmp_path):
    (tmp_path / "galaxy.yml").write_text('dependencies:\n  kubernetes.core: ">=6.4.0"\n')
    default = dict(OLD, name="new", default=True)
    data = {"legs": [default, OLD]}
    fake_collection(tmp_path / ".venv", "6.6.0")
    old = fake_collection(tmp_path / ".venv-old", "6.2.0")
    said = []
    assert legs.ensure_collections(OLD, data, tmp_path, log=said.append) == {"kubernetes.core": "6.6.0"}
    assert (old / "plugins" / "helm.py").read_text() == "# 6.6.0\n"
    assert said == ["[old] kubernetes.core 6.2.0 replaced by the default leg's 6.6.0 (galaxy.yml: >=6.4.0)"]
    # at or above the floor: left as it is
    said.clear()
    assert legs.ensure_collections(OLD, data, tmp_path, log=said.append) == {"kubernetes.core": "6.6.0"}
    assert said == []


def test_no_collection_at_the_floor_to_give_is_a_named_failure(tmp_path):
    (tmp_path / "galaxy.yml").write_text('dependencies:\n  kubernetes.core: ">=6.4.0"\n')
    default = dict(OLD, name="new", default=True)
    fake_collection(tmp_path / ".venv", "6.3.0")
    fake_collection(tmp_path / ".venv-old", "6.2.0")
    with pytest.raises(
        legs.LegError, match=r"^leg old: kubernetes.core 6.2.0 is older than galaxy.yml's 6.4.0"
    ):
        legs.ensure_collections(OLD, {"legs": [default, OLD]}, tmp_path, log=pytest.fail)
    with pytest.raises(
        legs.LegError, match=r"^leg new: kubernetes.core 6.3.0 is older than galaxy.yml's 6.4.0$"
    ):
        legs.ensure_collections(default, {"legs": [default, OLD]}, tmp_path, log=pytest.fail)
