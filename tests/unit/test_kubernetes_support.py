"""README.md's Kubernetes support matrix: one row per release, one column per feature, each cell backed.

- the README's table is exactly what tools/support_matrix.py writes from tools/kubernetes_support.toml;
- every test a proven or refused cell names is one pytest collects (its file, function and parameter id);
- a refused or not supported cell gives its reason, a proven or refused one names a test, every
  release has a cell in every feature, and the releases are the ones the lab builds.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ansible_collections.gpusplit.k8s.tests.unit.tool_module import load_tool

ROOT = Path(__file__).resolve().parents[2]
matrix = load_tool("support_matrix")
DATA = matrix.load_kubernetes()
EXISTING = "tests/integration/test_k8s_versions.py::test_the_versions_picked_from_the_live_discovery"


def small(**cell) -> dict:
    return {"releases": ["1.40.1", "1.39.2"], "features": [{"name": "f", "about": "a", "cells": cell}]}


def test_readme_is_what_the_generator_writes():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert text.count(matrix.KUBE_START) == 1 and text.count(matrix.KUBE_END) == 1
    assert matrix.generate(text) == text, (
        "README.md's support matrix is stale: run python tools/support_matrix.py"
    )


def test_a_changed_cell_in_the_readme_is_found():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    edited = text.replace("| not supported: ", "| proven: ", 1)
    assert edited != text
    assert matrix.generate(edited) == text


def test_every_test_a_cell_names_is_collected():
    assert matrix.missing_tests(DATA) == [], (
        "cells of tools/kubernetes_support.toml name tests pytest does not collect"
    )


def test_a_test_that_does_not_exist_is_found():
    gone = [
        EXISTING.replace("test_the_versions", "test_no_such"),
        f"{EXISTING}[1.36]",
        "tests/integration/test_k8s_versions.py::test_x",
    ]
    data = small(**{"1.40.1": {"state": "proven", "tests": [EXISTING, *gone]}})
    assert matrix.missing_tests(data) == sorted(gone)


def test_an_uncollectable_file_is_an_error_naming_it():
    data = small(
        **{"1.40.1": {"state": "proven", "tests": ["tests/integration/test_no_such_file.py::test_x"]}}
    )
    with pytest.raises(RuntimeError, match="test_no_such_file.py"):
        matrix.missing_tests(data)


def test_the_data_has_every_cell_and_no_problem():
    assert matrix.problems(DATA) == []
    names = [feature["name"] for feature in DATA["features"]]
    assert len(names) == len(set(names))


@pytest.mark.parametrize(
    ("cell", "said"),
    [
        ({"state": "refused", "tests": [EXISTING]}, "'f' on 1.40.1 is refused without a reason"),
        (
            {"state": "refused", "reason": " ", "tests": [EXISTING]},
            "'f' on 1.40.1 is refused without a reason",
        ),
        ({"state": "refused", "reason": "r"}, "'f' on 1.40.1 is refused without a test that shows it"),
        ({"state": "proven"}, "'f' on 1.40.1 is proven without a test that shows it"),
        ({"state": "not supported"}, "'f' on 1.40.1 is not supported without a reason"),
        ({"state": "works", "tests": [EXISTING]}, "'f' on 1.40.1: state 'works' is none of"),
    ],
)
def test_a_cell_without_its_test_or_reason_is_named(cell, said):
    found = matrix.problems(small(**{"1.40.1": cell, "1.39.2": {"state": "proven", "tests": [EXISTING]}}))
    assert len(found) == 1 and found[0].startswith(said), found


def test_a_missing_or_stray_cell_is_named(tmp_path):
    data = small(**{"1.40.1": {"state": "proven", "tests": [EXISTING]}, "1.38.0": {"state": "proven"}})
    assert matrix.problems(data) == [
        "'f' has a cell for 1.38.0, which is no release of the matrix",
        "'f' on 1.39.2 has no cell",
    ]
    bad = tmp_path / "support.toml"
    bad.write_text(
        'releases = ["1.40.1"]\n[[features]]\nname = "f"\nabout = "a"\n[features.cells."1.40.1"]\nstate = "refused"\n'
    )
    with pytest.raises(
        ValueError, match=r"support.toml: 'f' on 1.40.1 is refused without a test.*without a reason"
    ):
        matrix.load_kubernetes(bad)


def test_rows_are_the_releases_and_columns_the_features():
    data = {
        "releases": ["1.40.1", "1.39.2"],
        "features": [
            {
                "name": "one",
                "about": "the first",
                "cells": {
                    "1.40.1": {
                        "state": "proven",
                        "tests": ["tests/integration/test_a.py::test_b[x]"],
                        "reason": "c",
                    },
                    "1.39.2": {
                        "state": "refused",
                        "tests": ["tests/unit/test_d.py::test_e"],
                        "reason": "no API",
                    },
                },
            },
            {
                "name": "two",
                "about": "the second",
                "cells": {
                    "1.40.1": {"state": "not supported", "reason": "not run"},
                    "1.39.2": {"state": "proven", "tests": ["tests/integration/test_f.py::test_g"]},
                },
            },
        ],
    }
    lines = matrix.render_kubernetes(data, "1.40.1").splitlines()
    assert lines[0] == matrix.KUBE_START and lines[-1] == matrix.KUBE_END
    assert lines[1] == "| Kubernetes | one | two |"
    assert lines[3] == "| 1.40.1 (default) | proven: `test_a.py::test_b[x]` (c) | not supported: not run |"
    assert (
        lines[4]
        == "| 1.39.2 | refused: no API (`tests/unit/test_d.py::test_e`) | proven: `test_f.py::test_g` |"
    )
    assert "- two: the second" in lines


def test_the_releases_are_the_ones_the_lab_builds():
    env = (ROOT / "lab" / "versions.env").read_text()
    built = re.search(r"^KUBE_VERSIONS=(.+)$", env, re.M).group(1).split(",")
    assert sorted(DATA["releases"]) == sorted(built)
    assert matrix.default_release() in DATA["releases"]


def test_matrix_only_names_cell_tests_and_is_collected():
    slow = DATA["matrix_only"]
    assert slow and set(slow) <= matrix.named_tests(DATA)
    data = small(
        **{
            "1.40.1": {"state": "proven", "tests": [EXISTING]},
            "1.39.2": {
                "state": "not supported",
                "reason": "r",
                "tests": ["tests/integration/test_x.py::test_y"],
            },
        }
    )
    assert matrix.problems(data) == []
    data["matrix_only"] = [EXISTING, "tests/integration/test_x.py::test_y"]
    assert matrix.problems(data) == [
        "matrix_only names tests/integration/test_x.py::test_y, which no proven or refused cell names"
    ]
    data["matrix_only"] = [f"{EXISTING}_gone"]
    data["features"][0]["cells"]["1.39.2"] = {"state": "proven", "tests": [f"{EXISTING}_gone"]}
    assert matrix.missing_tests(data) == [f"{EXISTING}_gone"]
