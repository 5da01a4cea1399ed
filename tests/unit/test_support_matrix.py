"""The support matrix: pyproject.toml's legs, README.md's table, and the ansible-core this venv runs.

- README.md's support matrix is exactly what tools/support_matrix.py makes of pyproject.toml;
- the legs' Pythons are ones their ansible-core supports: every leg runs this file in its own venv
  (tools/legs.py), where the installed ansible-core's own constants are read (its controller
  Pythons from ansible-test, its lowest target Python from module_utils/basic.py);
- the default leg's pins are the project's dependency list, the Makefile looks for the default
  leg's Pythons, meta/runtime.yml asks for exactly the range of the legs, the lab proves the
  Kubernetes version the matrix names.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import yaml

from ansible_collections.gpusplit.k8s.tests.unit.tool_module import load_tool

ROOT = Path(__file__).resolve().parents[2]


def _load(name: str):
    return load_tool(name)


matrix = _load("support_matrix")
legs_tool = _load("legs")
DATA = legs_tool.load()


def _running_leg() -> dict:
    from ansible.release import __version__

    found = [leg for leg in DATA["legs"] if legs_tool.pin(leg, "ansible-core") == __version__]
    assert found, f"ansible-core {__version__} in this venv is no leg of pyproject.toml's support matrix"
    return found[0]


def test_readme_matrix_is_generated_from_the_data():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert text.count(matrix.START) == 1 and text.count(matrix.END) == 1
    assert matrix.rewrite(text, matrix.render(matrix.load())) == text, (
        "README.md's support matrix is stale: run python tools/support_matrix.py"
    )


def test_rewrite_replaces_only_the_marked_section():
    text = f"# title\n\n{matrix.START}\nold table\n{matrix.END}\n\nafter\n"
    assert matrix.rewrite(text, f"{matrix.START}\nnew\n{matrix.END}") == (
        f"# title\n\n{matrix.START}\nnew\n{matrix.END}\n\nafter\n"
    )


def test_rendered_rows_name_each_core_with_its_pythons():
    data = {
        "legs": [
            {
                "name": "a",
                "pins": ["ansible==9.9.0", "ansible-core==2.30.1"],
                "controller_python": ["3.14", "3.13"],
                "host_python": ["3.10", "3.11", "3.12"],
                "default": True,
                "lab": False,
            },
            {
                "name": "b",
                "pins": ["ansible==8.1.0", "ansible-core==2.29.4"],
                "controller_python": ["3.13"],
                "host_python": ["3.8", "3.10"],
                "default": False,
                "lab": True,
            },
        ],
        "matrix": {"kubernetes": ["1.40", "1.41"]},
    }
    rows = [line for line in matrix.render(data).splitlines() if line.startswith("| 2.")]
    assert rows[0].startswith(
        "| 2.30 (default) | ansible 9.9.0, ansible-core 2.30.1 | 3.13, 3.14 | 3.10 to 3.12 |"
    )
    assert rows[1].startswith("| 2.29 | ansible 8.1.0, ansible-core 2.29.4 | 3.13 | 3.8, 3.10 |")
    assert "the lab: split, verify, SSH host" in rows[1]
    assert "Kubernetes: 1.40, 1.41" in matrix.render(data)
    assert matrix.requires_ansible(data["legs"]) == ">=2.29.0,<2.31.0"


def test_this_venvs_core_supports_the_pythons_its_leg_names():
    import ansible.module_utils.basic as basic
    from ansible_test._util.target.common import constants

    leg = _running_leg()
    controllers = set(constants.CONTROLLER_PYTHON_VERSIONS)
    targets = controllers | set(constants.REMOTE_ONLY_PYTHON_VERSIONS)
    assert set(leg["controller_python"]) <= controllers, (leg["name"], sorted(controllers))
    assert set(leg["host_python"]) <= targets, (leg["name"], sorted(targets))
    lowest = min(leg["host_python"], key=matrix.minor)
    assert matrix.minor(lowest) == tuple(basic._PY_MIN), (
        f"leg {leg['name']}: the lowest managed-host Python is {lowest}, ansible-core's floor {basic._PY_MIN}"
    )
    running = f"{sys.version_info[0]}.{sys.version_info[1]}"
    assert running in leg["controller_python"], f"leg {leg['name']} runs on Python {running}"


def test_default_leg_is_the_project_dependency_list():
    default = [leg for leg in DATA["legs"] if leg.get("default")]
    assert len(default) == 1
    assert set(default[0]["pins"]) <= set(DATA["dependencies"])
    for leg in DATA["legs"]:
        wanted = legs_tool.requirements(leg, DATA["dependencies"])
        assert len(wanted) == len(DATA["dependencies"]) and set(leg["pins"]) <= set(wanted)
        assert {legs_tool.requirement_name(p) for p in leg["pins"]} == {"ansible", "ansible-core"}


def test_makefile_looks_for_the_default_legs_pythons():
    make = (ROOT / "Makefile").read_text()
    wanted = re.search(r"^VENV_PYTHONS := (.+)$", make, re.M).group(1).split()
    default = next(leg for leg in DATA["legs"] if leg.get("default"))
    assert wanted == default["controller_python"]
    minors = [matrix.minor(v) for v in wanted]
    assert minors == sorted(minors, reverse=True), "the default leg prefers the newest Python"


def test_runtime_requires_exactly_the_proven_range():
    runtime = yaml.safe_load((ROOT / "meta" / "runtime.yml").read_text())
    assert runtime["requires_ansible"] == matrix.requires_ansible(DATA["legs"])
    for leg in DATA["legs"]:
        core = legs_tool.pin(leg, "ansible-core")
        assert (ROOT / "tests" / "sanity" / f"ignore-{'.'.join(core.split('.')[:2])}.txt").is_file()


def test_the_lab_proves_the_kubernetes_version_named():
    env = (ROOT / "lab" / "versions.env").read_text()
    kube = re.search(r"^KUBE_VERSION=(\d+\.\d+)\.\d+$", env, re.M).group(1)
    assert DATA["matrix"]["kubernetes"] == [kube]


def test_lab_legs_get_labs_of_their_own():
    envs = [legs_tool.lab_env(DATA["legs"], leg, ROOT) for leg in DATA["legs"]]
    default = [env for leg, env in zip(DATA["legs"], envs, strict=True) if leg.get("default")]
    assert default == [{}]
    others = [env for env in envs if env]
    hosts = [env["GPUSPLIT_LAB_HOST"] for env in others]
    # each lab's address and the four pytest-xdist workers' above it (lab/workers.py) stay apart
    spans = [{int(h.split(".")[1]) + n for n in range(5)} for h in [*hosts, "127.0.0.1"]]
    assert sum(len(s) for s in spans) == len(set().union(*spans))
    assert len({env["GPUSPLIT_LAB_DIR"] for env in others}) == len(others)
    assert any(leg.get("lab") for leg in DATA["legs"] if not leg.get("default"))
